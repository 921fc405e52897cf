"""Tests of the grid's plan, its CI check, and the oracle on MoE and GPT-2 layouts.

Run from the repository root: python -m unittest discover -s oracle -t .
"""

import contextlib
import io
import json
import os
import shutil
import tempfile
import types
import unittest
from unittest import mock

from oracle import fakestep, grid

# A tiny Qwen2-MoE: 2 layers, 4 experts, top 2, a shared expert.
TINY_MOE = {
    "architectures": ["Qwen2MoeForCausalLM"],
    "model_type": "qwen2_moe",
    "hidden_size": 64,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 64,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 512,
    "tie_word_embeddings": False,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
}


class Plan(unittest.TestCase):
    def test_size_and_axes(self):
        """At least 1,000 cases, every axis value present, the plan the same on every call."""
        cases = [(m, r) for m in grid.PLAN for g in grid.groups(m) for r in g]
        self.assertGreaterEqual(len(cases), 1000)
        ids = [fakestep.case_id(m, r) for m, r in cases]
        self.assertEqual(len(set(ids)), len(ids), "duplicate case ids")
        again = [fakestep.case_id(m, r) for m in grid.PLAN for g in grid.groups(m) for r in g]
        self.assertEqual(ids, again)
        for field, want in (("method", {"full", "lora", "qlora"}), ("grad_ckpt", {"none", "full"}), ("attn", {"sdpa", "eager"}),
                            ("precision", {"bf16-true", "bf16-mixed", "fp32"}), ("seq_len", set(grid.SEQ)), ("batch", set(grid.BATCH)),
                            ("grad_accum", {1, 4})):
            self.assertEqual({getattr(r, field) for _, r in cases}, want, field)
        for m in grid.PLAN:
            self.assertTrue(os.path.isfile(os.path.join(grid.ROOT, "catalog", "models", m, "config.json")), m)

    def test_qlora_groups_last_and_dense_only(self):
        """QLoRA groups come after the others (their drawn shapes and rows unchanged), dense models only,
        double quantization on and off, checkpointing none and full."""
        for m in grid.PLAN:
            gs = grid.groups(m)
            methods = [g[0].method for g in gs]
            n = methods.count("qlora")
            self.assertNotIn("qlora", methods[: len(methods) - n], m)
            with open(os.path.join(grid.ROOT, "catalog", "models", m, "config.json")) as f:
                moe = fakestep.is_moe(types.SimpleNamespace(**json.load(f)))
            if moe:
                # MoE members: bf16-mixed LoRA only, after every other group.
                mixed = [g[0] for g in gs if g[0].precision == "bf16-mixed"]
                self.assertEqual({(r.method, r.grad_ckpt) for r in mixed}, {("lora", "none"), ("lora", "full")}, m)
                self.assertEqual([g[0].precision for g in gs[-len(mixed):]], ["bf16-mixed"] * len(mixed), m)
            if moe or m in grid.NO_FP32_SDPA:
                # MoE: not quantized; NO_FP32_SDPA: QLoRA's fp32 attention is not simulated.
                self.assertEqual(n, 0, m)
                continue
            q = [g[0] for g in gs if g[0].method == "qlora"]
            true = {(r.quant, r.grad_ckpt) for r in q if r.precision == "bf16-true"}
            mixed = {(r.quant, r.grad_ckpt, r.attn) for r in q if r.precision == "bf16-mixed"}
            self.assertEqual(true, {(a, c) for a in grid.QLORA_QUANTS for c in ("none", "full")}, m)
            self.assertEqual({r.precision for r in q} - {"bf16-true", "bf16-mixed"}, set(), m)
            # Under autocast (not Falcon's unquantized Linears), after the bf16-true groups: SDPA on the
            # members that have it, eager on every member.
            want = set()
            if m not in grid.NO_MIXED_QLORA:
                attns = ["eager"] if m in grid.EAGER_ONLY else ["sdpa", "eager"]
                want = {(grid.QLORA_MIXED_QUANT, c, a) for c in ("none", "full") for a in attns}
            self.assertEqual(mixed, want, m)
            precs = [r.precision for r in q]
            self.assertEqual(precs, sorted(precs, key=lambda p: p == "bf16-mixed"), m)

    def test_plan_committed(self):
        """Every case of the plan has its row in the committed grid, and nothing else is there."""
        plan = {fakestep.case_id(m, r) for m in grid.PLAN for g in grid.groups(m) for r in g}
        with open(grid.CASES) as f:
            committed = [json.loads(x)["id"] for x in f if x.strip()]
        self.assertEqual(set(committed), plan)
        self.assertEqual(committed, sorted(committed))

    def test_one_build_per_group(self):
        for m in grid.PLAN:
            for g in grid.groups(m):
                self.assertEqual({fakestep.build_key(r) for r in g}, {fakestep.build_key(g[0])}, m)

    def test_slice_is_in_plan_and_committed(self):
        plan = {fakestep.case_id(m, r) for m in grid.PLAN for g in grid.groups(m) for r in g}
        sl = [fakestep.case_id(m, r) for m, g in grid.slice_units() for r in g]
        self.assertGreaterEqual(len(sl), 12)
        self.assertLessEqual(set(sl), plan)
        with open(grid.CASES) as f:
            committed = {json.loads(x)["id"] for x in f if x.strip()}
        self.assertLessEqual(set(sl), committed, "the CI slice must be in the committed grid")

    def test_slice_covers_every_method_and_precision(self):
        """--check re-simulates a case of every (method, precision) the plan has, QLoRA's quant schemes
        and bf16-mixed under checkpointing included."""
        def kinds(units):
            return {(r.method, r.precision, r.quant if r.method == "qlora" else "") for _, g in units for r in g}

        sl = grid.slice_units()
        self.assertEqual(kinds(sl), kinds((m, g) for m in grid.PLAN for g in grid.groups(m)))
        self.assertIn(("lora", "bf16-mixed", "full"), {(r.method, r.precision, r.grad_ckpt) for _, g in sl for r in g})


class Main(unittest.TestCase):
    """main's --methods/--precisions/--merge, with the simulation replaced by canned rows."""

    def fake_run(self, calls):
        def run(units, jobs, progress=False, partial=None):
            calls.append(units)
            open(partial, "a").close()
            return [{"id": fakestep.case_id(m, r), "model": m, "row": "new"} for m, g in units for r in g], [], 0.0

        return run

    def main(self, *argv):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = grid.main(list(argv))
        return rc, err.getvalue()

    def test_bad_filters_are_refused_before_anything_is_written(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "grid.jsonl")
            with open(out, "w") as f:
                f.write('{"id": "kept"}\n')
            calls = []
            with mock.patch.object(grid, "run", self.fake_run(calls)):
                for argv, flag in ((["--methods", "QLoRA"], "--methods"), (["--precisions", "bf16"], "--precisions"),
                                   (["--methods", ","], "--methods"),
                                   (["--methods", "qlora", "--models", "Qwen/Qwen1.5-MoE-A2.7B"], "--methods")):
                    with self.subTest(argv=argv):
                        rc, err = self.main(*argv, "--out", out, "--merge")
                        self.assertEqual(rc, 2)
                        self.assertIn(flag, err)
            self.assertEqual(calls, [])
            with open(out) as f:
                self.assertEqual(f.read(), '{"id": "kept"}\n')

    def test_merge_keeps_other_rows_and_replaces_simulated_ones(self):
        model = "Qwen/Qwen2.5-0.5B"
        qlora = [fakestep.case_id(model, r) for g in grid.groups(model) if g[0].method == "qlora" for r in g]
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "grid.jsonl")
            other = {"id": "oracle-zzz-other", "model": "other/model", "row": "old"}
            grid.write_rows(out, [other, {"id": qlora[0], "model": model, "row": "old"}])
            calls = []
            with mock.patch.object(grid, "run", self.fake_run(calls)):
                rc, err = self.main("--methods", "qlora", "--models", model, "--merge", "--out", out)
            self.assertEqual(rc, 0, err)
            self.assertEqual({g[0].method for _, g in calls[0]}, {"qlora"})
            with open(out) as f:
                rows = [json.loads(x) for x in f]
            self.assertEqual([r["id"] for r in rows], sorted(qlora + [other["id"]]))
            self.assertIn(other, rows)
            self.assertEqual({r["row"] for r in rows if r["id"] in qlora}, {"new"})


class Check(unittest.TestCase):
    """--check passes on rows the oracle writes and fails on any changed byte or a missing row."""

    def test_check(self):
        model = "Qwen/Qwen2.5-0.5B"
        req = fakestep.Request(method="lora", seq_len=64, batch=1, grad_ckpt="full")
        units = [(model, [req])]
        rows, failed, _ = grid.run(units, 1)
        self.assertEqual(failed, [])
        with tempfile.TemporaryDirectory() as d:
            good = os.path.join(d, "good.jsonl")
            grid.write_rows(good, rows)
            self.assertEqual(grid.check(good, units, 1), 0)
            bad = os.path.join(d, "bad.jsonl")
            r = dict(rows[0])
            r["measured"] = dict(r["measured"], original=r["measured"]["original"].replace(" bytes", "0 bytes"))
            grid.write_rows(bad, [r])
            self.assertEqual(grid.check(bad, units, 1), 1)
            empty = os.path.join(d, "empty.jsonl")
            open(empty, "w").close()
            self.assertEqual(grid.check(empty, units, 1), 1)
            self.assertEqual(grid.check(good, [], 1), 1, "a check of no case must fail")


class TestMetaCache(unittest.TestCase):
    """Replaying remembered output layouts changes no figure of a run."""

    def test_same_figures(self):
        d = tempfile.mkdtemp(prefix="fakestep-cache-")
        try:
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(TINY_MOE, f)
            for kw in ({"method": "lora", "seq_len": 128, "batch": 2},
                       {"method": "full", "seq_len": 64, "batch": 1, "grad_ckpt": "full", "attn": "eager"},
                       {"method": "lora", "precision": "fp32", "seq_len": 64, "batch": 2, "grad_accum": 2, "grad_ckpt": "full"}):
                req = fakestep.Request.from_json(kw)
                figs = []
                for on in (False, True, True):  # the second cached run replays what the first remembered
                    fakestep.META_CACHE = on
                    try:
                        r = fakestep.simulate(d, req)
                    finally:
                        fakestep.META_CACHE = True
                    figs.append((r.peak_bytes, r.phase_peak_bytes, r.params_bytes, r.grads_bytes, r.optimizer_state_bytes))
                with self.subTest(kw=kw):
                    self.assertEqual(figs[0], figs[1])
                    self.assertEqual(figs[0], figs[2])
            self.assertTrue(any(v is not fakestep._uncacheable for v in fakestep._cache.values()), "nothing was cached")
        finally:
            shutil.rmtree(d)


class Layouts(unittest.TestCase):
    def test_moe_grouped_mm(self):
        """A MoE model runs with the pinned experts implementation; every expert weight gets a gradient."""
        d = tempfile.mkdtemp(prefix="fakestep-moe-")
        try:
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(TINY_MOE, f)
            res = fakestep.simulate(d, fakestep.Request(method="full", precision="bf16-true", seq_len=64, batch=2))
            self.assertEqual(res.experts, fakestep.EXPERTS)
            self.assertEqual(res.grads_bytes, res.params_bytes)
            self.assertGreater(res.peak_bytes, res.params_bytes + res.grads_bytes + res.optimizer_state_bytes)
            row = fakestep.case(d, fakestep.Request(method="full", seq_len=64, batch=2), res, "tiny/moe")
            self.assertIn("MoE experts grouped_mm", row["notes"])
        finally:
            shutil.rmtree(d)

    def test_gpt2_attention_targets(self):
        """GPT-2's projections are Conv1D, and c_proj sits in both attention and MLP."""
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        cfg = AutoConfig.from_pretrained(os.path.join(grid.ROOT, "catalog", "models", "openai-community", "gpt2"))
        cfg.n_layer = 1
        with torch.device("meta"):
            m = AutoModelForCausalLM.from_config(cfg)
        self.assertEqual(fakestep.lora_targets(m, ["attention"]), ["c_attn", "attn.c_proj"])
        self.assertEqual(fakestep.lora_targets(m, ["mlp"]), ["c_fc", "mlp.c_proj"])
        res = fakestep.Result(0, {}, 0, 0, 0, 0, 0, 0, ["c_attn", "attn.c_proj"], "float32", 0, 0, 0)
        row = fakestep.case(os.path.join(grid.ROOT, "catalog", "models", "openai-community", "gpt2"),
                            fakestep.Request(method="lora", lora_targets=["attention"]), res, "openai-community/gpt2")
        self.assertEqual(row["lora"]["targets"], ["attention"], "the schema has no name for attn.c_proj alone")
        self.assertIn("LoRA modules c_attn, attn.c_proj", row["notes"])


if __name__ == "__main__":
    unittest.main()
