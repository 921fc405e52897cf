"""Tests of the oracle-versus-real bookkeeping (no torch needed)."""

import importlib.util
import json
import os
import tempfile
import types
import unittest

from oracle import vsreal

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def row(**kw):
    r = {
        "id": "x-001", "trust": "high", "model": "org/m", "arch": "llama", "method": "lora", "precision": "bf16-true",
        "lora": {"rank": 8, "alpha": 16, "targets": ["q_proj", "v_proj"]}, "seq_len": 512, "seq_len_kind": "fixed",
        "batch": 2, "grad_accum": 4, "grad_ckpt": "none", "optimizer": "adamw_torch", "attn": "sdpa",
        "framework": "litgpt", "gpu": {"name": "A10G", "count": 1, "vram_gib": 24},
        "sharding": {"strategy": "none", "cpu_offload": "none"},
        "measured": {"kind": "allocated", "gib": 10.0, "oom": False}, "notes": "",
    }
    r.update(kw)
    return r


class Plan(unittest.TestCase):
    def test_refusals(self):
        cases = [
            (row(), None),
            (row(method="qlora", optimizer="paged_adamw_32bit"), None),  # LitGPT's QLoRA is imitated
            (row(method="qlora", optimizer="paged_adamw_32bit", framework="trl"), "bitsandbytes' optimizers"),
            (row(precision="bf16-mixed"), "autocast"),
            (row(sharding={"strategy": "fsdp_full_shard"}, gpu={"count": 2}), "sharding"),
            (row(gpu={"count": None}, sharding={"strategy": "fsdp_full_shard"}), "unsettled"),
            (row(measured={"kind": "active", "gib": 3.0}, framework="torchtune"), "active-level"),
            (row(framework="unsloth"), "does not imitate"),
        ]
        for r, want in cases:
            got = vsreal.refusal(r)
            if want is None:
                self.assertIsNone(got)
            else:
                self.assertIn(want, got or "")
        both = vsreal.refusal(row(precision="bf16-mixed", sharding={"strategy": "fsdp_full_shard"}, gpu={"count": 4}))
        self.assertIn("autocast", both)
        self.assertIn("fsdp_full_shard over 4 GPUs", both)
        # The HF stack runs bf16-mixed under the autocast imitation; fp16-mixed's scaler is not imitated.
        self.assertIsNone(vsreal.refusal(row(precision="bf16-mixed", framework="hf-trainer")))
        self.assertIn("GradScaler", vsreal.refusal(row(precision="fp16-mixed", framework="hf-trainer")) or "")

    def test_qlora_request_and_script_date(self):
        src = lambda d: f"LitGPT table (commit 00af8b0d {d})"
        r = row(method="qlora", optimizer="paged_adamw_32bit", quant={"scheme": "nf4", "double_quant": True}, source=src("2024-09-27"))
        q = vsreal.request(r)
        self.assertEqual((q["quant"], q["lora_rank"], q["optimizer"]), ("nf4-dq", 8, "paged_adamw_32bit"))
        self.assertEqual(vsreal.litgpt_script(r), {"stable_embedding": False, "bnb_saves_input": True})
        self.assertEqual(vsreal.litgpt_script(dict(r, source=src("2025-03-01"))), {"stable_embedding": True, "bnb_saves_input": False})
        self.assertEqual(vsreal.litgpt_script(dict(r, source="no date")), {})
        self.assertEqual(vsreal.litgpt_script(row(source=src("2023-10-20"))), {})  # not QLoRA

    def test_later_micro_batches_of_the_resource_table_script(self):
        self.assertEqual(vsreal.later_seq_len(row(seq_len=1304, notes="first iteration deliberately uses the longest Alpaca sample")), 652)
        self.assertIsNone(vsreal.later_seq_len(row(seq_len=512, notes="each batch padded to its longest sample")))

    def test_request_and_dropout(self):
        q = vsreal.request(row(grad_accum=None, notes="lora_dropout 0.1; measured ..."))
        self.assertEqual(q["grad_accum"], 1)
        self.assertEqual(q["lora_dropout"], 0.1)
        self.assertEqual(q["lora_targets"], ["q_proj", "v_proj"])
        self.assertEqual(q["lora_alpha"], 16)
        self.assertEqual(vsreal.request(row(notes="LoRA r=8 alpha=16 dropout 0.05 on query"))["lora_dropout"], 0.05)
        self.assertEqual(vsreal.request(row())["lora_dropout"], 0.05)  # LitGPT's default
        self.assertEqual(vsreal.request(row(framework="trl"))["lora_dropout"], 0.0)
        self.assertNotIn("lora_rank", vsreal.request(row(method="full", lora=None)))

    def test_table_errors_and_summary(self):
        dev = [row(id="a", measured={"kind": "allocated", "gib": 10.0}),
               row(id="b", measured={"kind": "allocated", "gib": 20.0}, trust="low"),
               row(id="c", method="qlora", framework="trl", optimizer="paged_adamw_32bit"),
               row(id="d", measured={"kind": "allocated", "gib": None, "oom": True}),
               row(id="e", measured={"kind": "active", "gib": 3.0}, framework="torchtune"),
               row(id="f", measured={"kind": "reserved", "gib": 3.0}, framework="trl")]
        sims = [{"id": "oracle-a", "framework": "litgpt", "measured": {"gib": 10.5}},
                {"id": "oracle-b", "framework": "litgpt", "measured": {"gib": 19.0}},
                {"id": "oracle-d", "framework": "litgpt", "measured": {"gib": 30.0}}]
        t = vsreal.table(dev, sims)
        self.assertIn("| a | high | org/m | lora | r8 q_proj,v_proj; bf16-true s512 b2 ga4 | 10.00 | 10.50 | +5.0 | litgpt |", t)
        self.assertIn("| 19.00 | -5.0 |", t)
        self.assertIn("not simulated: QLoRA with paged_adamw_32bit", t)
        self.assertIn("| litgpt | lora | 1 | high | 5.0 | 5.0 | 5.0 |", t)  # per method
        self.assertIn("| OOM | 30.00 | — | litgpt; measured OOM on a 24 GB card, the oracle's peak exceeds it too |", t)
        small = vsreal.table(dev, sims[:2] + [{"id": "oracle-d", "framework": "litgpt", "measured": {"gib": 20.0}}])
        self.assertIn("| OOM | 20.00 | — | litgpt; measured OOM on a 24 GB card, the oracle's peak fits: disagrees |", small)
        self.assertIn("| litgpt | 1 | high | 5.0 | 5.0 | 5.0 |", t)
        self.assertIn("| litgpt | 2 | all | 5.0 | 5.0 | 5.0 |", t)
        self.assertEqual(t, vsreal.table(dev, sims))
        for absent in ("| e |", "| f |"):  # only allocated-level figures are compared
            self.assertNotIn(absent, t)

    def test_table_rewrites_only_between_markers(self):
        d = tempfile.mkdtemp()
        dev, sims, doc = (os.path.join(d, n) for n in ("dev.jsonl", "sims.jsonl", "doc.md"))
        with open(dev, "w") as f:
            f.write(json.dumps(row(id="a")) + "\n")
        with open(sims, "w") as f:
            f.write(json.dumps({"id": "oracle-a", "framework": "litgpt", "measured": {"gib": 11.0}}) + "\n")
        with open(doc, "w") as f:
            f.write(f"intro\n{vsreal.BEGIN}\nold\n{vsreal.END}\noutro\n")
        self.assertEqual(vsreal.main(["table", dev, sims, doc]), 0)
        text = open(doc).read()
        self.assertTrue(text.startswith("intro\n") and text.endswith("\noutro\n"), text)
        self.assertNotIn("old", text)
        self.assertIn("+10.0", text)
        with open(doc, "w") as f:
            f.write("no markers\n")
        self.assertEqual(vsreal.main(["table", dev, sims, doc]), 1)

    def test_committed_table_is_current(self):
        """docs/oracle-vs-real.md holds the table the committed rows give."""
        dev = vsreal.read_jsonl(os.path.join(ROOT, "evidence", "dev.jsonl"))
        sims = vsreal.read_jsonl(os.path.join(ROOT, "evidence", "oracle-real.jsonl"))
        doc = open(os.path.join(ROOT, "docs", "oracle-vs-real.md")).read()
        self.assertIn(vsreal.table(dev, sims), doc, "regenerate: python3 -m oracle.vsreal table evidence/dev.jsonl evidence/oracle-real.jsonl docs/oracle-vs-real.md")
        for s in sims:
            self.assertTrue(s["simulated"] and s["id"].startswith("oracle-"), s["id"])
            self.assertIn(s["id"].removeprefix("oracle-"), {r["id"] for r in dev})


    def test_simulate_keeps_the_other_stacks_rows(self):
        """simulate rewrites one stack's rows, keeps the other's, and sorts by id."""
        d = tempfile.mkdtemp()
        dev, out = os.path.join(d, "dev.jsonl"), os.path.join(d, "out.jsonl")
        rows = [row(id="lit-b"), row(id="lit-a"), row(id="hf-a", framework="trl"), row(id="lit-q", method="qlora", precision="bf16-mixed")]
        with open(dev, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        with open(out, "w") as f:
            f.write(json.dumps({"id": "oracle-hf-a", "framework": "hf-trainer", "measured": {"gib": 1.0}}) + "\n")
            f.write(json.dumps({"id": "oracle-lit-old", "framework": "litgpt", "measured": {"gib": 9.0}}) + "\n")

        def fake(r, stack):
            return ({"id": f"oracle-{r['id']}", "framework": stack, "measured": {"gib": 2.0}},
                    types.SimpleNamespace(run_s=0.0, cpu_s=0.0), 0.0)

        real, vsreal._simulate_one = vsreal._simulate_one, fake
        try:
            self.assertEqual(vsreal.main(["simulate", "--stack", "litgpt", dev, out]), 0)
        finally:
            vsreal._simulate_one = real
        got = [r["id"] for r in vsreal.read_jsonl(out)]
        # bf16-mixed is refused; the stale LitGPT row goes; the HF row stays.
        self.assertEqual(got, ["oracle-hf-a", "oracle-lit-a", "oracle-lit-b"])


HAVE_HF = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers", "peft"))


@unittest.skipUnless(HAVE_HF, "torch, transformers and peft are not installed (the oracle's pinned environment has them)")
class HFStack(unittest.TestCase):
    def test_an_hf_row_runs_through_fakestep(self):
        r = row(id="tiny-001", model="HuggingFaceTB/SmolLM2-135M", framework="trl", seq_len=32, batch=1, grad_accum=1,
                lora={"rank": 4, "alpha": 8, "targets": ["q_proj", "v_proj"]})
        sim, res, _ = vsreal._simulate_one(r, vsreal.HF)
        self.assertEqual(sim["id"], "oracle-tiny-001")
        self.assertEqual(sim["framework"], "hf-trainer")
        self.assertTrue(sim["simulated"])
        self.assertEqual(sim["lora"]["targets"], ["q_proj", "v_proj"])
        # 135M bf16 weights at least, and the peak is the result's.
        self.assertGreater(res.params_bytes, 2 * 130_000_000)
        self.assertEqual(sim["measured"]["gib"], round(res.peak_bytes / 2**30, 4))


if __name__ == "__main__":
    unittest.main()
