"""Tests of the fake bitsandbytes 4-bit path (oracle/qlora.py) on crafted modules.

Run from the repository root: python -m unittest oracle.test_qlora
"""

import json
import os
import shutil
import tempfile
import unittest

import torch

from oracle import fakestep, qlora
from oracle.test_fakestep import TINY, _imitated_autocast, _real_cuda_autocast, r512


def storage_bytes(t):
    return t.untyped_storage().nbytes()


class TestStorage(unittest.TestCase):
    """quantize_4bit's storage for a 128 x 256 weight (32,768 weights, 512 blocks of 64)."""

    def layer(self, quant):
        w = torch.empty(128, 256, dtype=torch.bfloat16, device="meta")
        return qlora.Linear4bit(256, 128, False, torch.bfloat16, quant, w)

    def test_nf4(self):
        m = self.layer("nf4")
        self.assertEqual((m.weight.dtype, tuple(m.weight.shape)), (torch.uint8, (16384, 1)))
        self.assertEqual(type(m.weight).__name__, "Params4bit")
        qs = m.weight.quant_state
        self.assertEqual((qs.absmax.dtype, qs.absmax.numel()), (torch.float32, 512))
        self.assertEqual((qs.code.dtype, qs.code.numel()), (torch.float32, 16))
        self.assertFalse(qs.nested)
        self.assertEqual(sorted(n for n, _ in m.named_buffers()), ["qs_absmax", "qs_code"])

    def test_nf4_double_quant(self):
        m = self.layer("nf4-dq")
        qs = m.weight.quant_state
        self.assertTrue(qs.nested)
        self.assertEqual((qs.absmax.dtype, qs.absmax.numel()), (torch.uint8, 512))
        self.assertEqual((qs.state2.absmax.dtype, qs.state2.absmax.numel()), (torch.float32, 2))  # ceil(512 / 256)
        self.assertEqual((qs.state2.code.dtype, qs.state2.code.numel()), (torch.float32, 256))
        self.assertEqual((qs.offset.dtype, qs.offset.dim()), (torch.float32, 0))
        want = 16384 + 512 + 2 * 4 + 256 * 4 + 4 + 16 * 4
        got = storage_bytes(m.weight) + sum(storage_bytes(b) for b in m.buffers())
        self.assertEqual(got, want)

    def test_unknown_quant_is_refused(self):
        # fakestep's request check and this module name the same schemes; anything else is an error here.
        self.assertEqual(set(fakestep.QLORA_QUANTS), set(qlora.QUANTS))
        with self.assertRaisesRegex(ValueError, "quant 'int8'"):
            self.layer("int8")

    def test_odd_sizes_round_up(self):
        w = torch.empty(3, 43, dtype=torch.bfloat16, device="meta")  # 129 weights: 65 bytes, 3 blocks
        m = qlora.Linear4bit(43, 3, False, torch.bfloat16, "nf4", w)
        self.assertEqual(storage_bytes(m.weight), 65)
        self.assertEqual(m.weight.quant_state.absmax.numel(), 3)


class TestMatMul4Bit(unittest.TestCase):
    """What the forward and backward allocate and save, counted by the oracle's LiveBytes."""

    def run_layer(self, quant, x_dtype, requires_grad=True, tokens=40):
        out_f, in_f = 96, 128
        w = torch.empty(out_f, in_f, dtype=torch.bfloat16, device="meta")
        m = qlora.Linear4bit(in_f, out_f, False, torch.bfloat16, quant, w)
        live = fakestep.LiveBytes()
        x = torch.empty(tokens, in_f, dtype=x_dtype, device="meta", requires_grad=requires_grad)
        live.track(x)
        for t in list(m.parameters()) + list(m.buffers()):
            live.track(t)
        saved = []
        with live, torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
            before = live.cur
            y = m(x)
            after_fwd_peak, after_fwd = live.peak, live.cur
            if requires_grad:
                y.backward(torch.empty_like(y))
        return dict(m=m, x=x, y=y, saved=saved, before=before, fwd_peak=after_fwd_peak, fwd_live=after_fwd,
                    peak=live.peak, sizes=(out_f, in_f, tokens))

    def test_forward_dequantizes_a_temporary_and_saves_nothing(self):
        # 40 tokens: the dequantized weight makes the peak; 400: the output's fp32 cast does.
        for n, first in ((40, True), (400, False)):
            with self.subTest(tokens=n):
                r = self.run_layer("nf4", torch.float32, tokens=n)
                out_f, in_f, tokens = r["sizes"]
                self.assertEqual(r["y"].dtype, torch.float32)  # cast back to the input's dtype
                self.assertEqual(r["saved"], [])  # MatMul4Bit keeps only the packed weight, as an attribute
                # Live after the forward: the fp32 output only (the bf16 input cast and the bf16
                # product died: nothing saved them).
                self.assertEqual(r["fwd_live"] - r["before"], r512(tokens * out_f * 4))
                # The forward's peak holds the bf16 input, the dequantized bf16 weight and the bf16
                # product at once, then (Linear4bit.forward still holding its bf16 input) the
                # product and its fp32 cast.
                w16, x16, y16, y32 = r512(out_f * in_f * 2), r512(tokens * in_f * 2), r512(tokens * out_f * 2), r512(tokens * out_f * 4)
                self.assertEqual(x16 + w16 + y16 > x16 + y16 + y32, first)
                self.assertEqual(r["fwd_peak"] - r["before"], max(x16 + w16 + y16, x16 + y16 + y32))
                self.assertEqual(r["x"].grad.dtype, torch.float32)
                self.assertEqual(tuple(r["x"].grad.shape), (tokens, in_f))

    def test_double_quant_adds_an_fp32_absmax_temporary(self):
        out_f, in_f = 96, 128
        for quant, extra in (("nf4", 0), ("nf4-dq", r512(out_f * in_f // 64 * 4))):
            w = torch.empty(out_f, in_f, dtype=torch.bfloat16, device="meta")
            m = qlora.Linear4bit(in_f, out_f, False, torch.bfloat16, quant, w)
            live = fakestep.LiveBytes()
            for t in list(m.parameters()) + list(m.buffers()):
                live.track(t)
            with live:
                before = live.cur
                dq = qlora.dequantize(m.weight.t(), m.weight.quant_state)
                self.assertEqual((tuple(dq.shape), dq.dtype), ((in_f, out_f), torch.bfloat16))  # transposed back
                self.assertEqual(live.peak - before, r512(out_f * in_f * 2) + extra, quant)
                self.assertEqual(live.cur - before, r512(out_f * in_f * 2), quant)  # the absmax temporary died

    def test_no_grad_input_records_no_backward(self):
        r = self.run_layer("nf4", torch.bfloat16, requires_grad=False)
        self.assertIsNone(r["y"].grad_fn)


class TestModel(unittest.TestCase):
    """The tiny Llama as QLoRA loads and prepares it."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp()
        with open(os.path.join(cls.dir, "config.json"), "w") as f:
            json.dump(TINY, f)

    def build(self, quant="nf4-dq", ckpt="none"):
        req = fakestep.Request(method="qlora", quant=quant, lora_rank=8, lora_targets=["attention"], grad_ckpt=ckpt, seq_len=32)
        req.check()
        return fakestep.build(self.dir, req), req

    def test_dtypes_after_preparation(self):
        (model, targets), _ = self.build()
        self.assertEqual(targets, ["q_proj", "k_proj", "v_proj", "o_proj"])
        kinds = {}
        for n, p in model.named_parameters():
            kinds[n] = (type(p).__name__, p.dtype, p.requires_grad)
        for n, (cls, dt, rg) in kinds.items():
            if "lora_" in n:
                self.assertEqual((dt, rg), (torch.float32, True), n)
            elif any(k in n for k in ("_proj.base_layer.weight", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")):
                self.assertEqual((cls, dt, rg), ("Params4bit", torch.uint8, False), n)
            else:  # embeddings, norms and the output layer: kept, then cast to fp32 by PEFT
                self.assertEqual((dt, rg), (torch.float32, False), n)
        head = model.get_output_embeddings()
        self.assertIs(type(head), torch.nn.Linear)  # transformers keeps the output layer unquantized
        n4 = sum(isinstance(m, qlora.Linear4bit) for m in model.modules())
        self.assertEqual(n4, 2 * 7)

    def test_checkpointing_enables_input_grads(self):
        (model, _), _ = self.build(ckpt="full")
        emb = model.get_input_embeddings()
        self.assertTrue(emb._forward_hooks, "prepare_model_for_kbit_training did not hook the embeddings")
        (model, _), _ = self.build(ckpt="none")
        self.assertFalse(model.get_input_embeddings()._forward_hooks)

    def test_simulate_counts_quant_state(self):
        for quant in ("nf4", "nf4-dq"):
            (model, targets), req = self.build(quant=quant)
            res = fakestep.simulate(self.dir, req, built=(model, targets))
            bufs = sum(r512(storage_bytes(b)) for b in model.buffers() if b.device.type == "meta")
            packed = sum(r512(storage_bytes(m.weight)) for m in model.modules() if isinstance(m, qlora.Linear4bit))
            self.assertGreater(bufs, 0)
            # The peak holds at least every weight, buffer, adapter gradient and AdamW state.
            self.assertGreaterEqual(res.peak_bytes, res.params_bytes + bufs + res.grads_bytes + res.optimizer_state_bytes)
            self.assertEqual(res.params_bytes - packed, sum(r512(storage_bytes(p)) for p in model.parameters() if p.dtype != torch.uint8))

    def test_case_row(self):
        (model, targets), req = self.build(quant="nf4")
        res = fakestep.simulate(self.dir, req, built=(model, targets))
        row = fakestep.case(self.dir, req, res, "tiny/llama")
        self.assertEqual(row["method"], "qlora")
        self.assertEqual(row["quant"], {"scheme": "nf4", "double_quant": False, "compute_dtype": "bf16", "storage_dtype": "uint8"})
        self.assertEqual(row["optimizer_state_dtype"], "fp32")
        # The quant scheme enters the id of a QLoRA row only.
        other = fakestep.Request(method="qlora", quant="nf4-dq", lora_rank=8, lora_targets=["attention"], seq_len=32)
        self.assertNotEqual(fakestep.case_id("m", req), fakestep.case_id("m", other))
        a, b = fakestep.Request(method="lora", quant="nf4"), fakestep.Request(method="lora", quant="nf4-dq")
        self.assertEqual(fakestep.case_id("m", a), fakestep.case_id("m", b))

    def test_precisions(self):
        # A bf16-loaded base with or without HF Trainer's bf16 autocast; nothing else.
        fakestep.Request(method="qlora", precision="bf16-mixed").check()
        for prec in ("fp32", "fp16-mixed", "fp16-true"):
            with self.assertRaises(fakestep.NotSimulated, msg=prec):
                fakestep.Request(method="qlora", precision=prec).check()
        with self.assertRaises(fakestep.NotSimulated):
            fakestep.Request(method="qlora", quant="int8").check()
        # One token: bitsandbytes' inference kernel, refused by the request check, not a
        # NotImplementedError from the layer in the middle of a run.
        with self.assertRaisesRegex(fakestep.NotSimulated, "seq_len 1, batch 1"):
            fakestep.Request(method="qlora", seq_len=1, batch=1).check()
        fakestep.Request(method="qlora", seq_len=1, batch=2).check()
        fakestep.Request(method="qlora", seq_len=1, batch=1, grad_ckpt="full").check()  # inputs require grad

    def test_one_token_runs_with_checkpointing(self):
        (model, targets), req = self.build(ckpt="full")
        req.seq_len, req.batch = 1, 1
        req.check()
        self.assertGreater(fakestep.simulate(self.dir, req, built=(model, targets)).peak_bytes, 0)



class TestAutocast(unittest.TestCase):
    """QLoRA under bf16 autocast: what the imitation saves in the forward
    against what CUDA autocast's own kernels save (fake CUDA tensors; see
    test_fakestep.Autocast), on the tiny Llama with every Linear adapted.
    Eager attention: the oracle's SDPA is a Python function that the real
    dispatcher's autocast never sees; its own casts are checked by
    test_fakestep.Autocast.test_sdpa_inputs_cast."""

    def make(self, ckpt):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(TINY, f)
        req = fakestep.Request(method="qlora", precision="bf16-mixed", quant="nf4-dq", lora_rank=4,
                               lora_targets=["all-linear"], grad_ckpt=ckpt, seq_len=16, batch=2, attn="eager")
        req.check()

        def make():
            model, _ = fakestep.build(d, req)
            return model, torch.zeros((2, 16), dtype=torch.long)

        return make

    def run_model(self, o):
        model, ids = o
        # The real path swaps each parameter and buffer for a fake CUDA one;
        # the quantization state bitsandbytes keeps on the packed weight is
        # rebuilt from the layer's buffers (the same tensors on meta).
        for m in model.modules():
            if isinstance(m, qlora.Linear4bit):
                old = m.qs
                s2 = None
                if old.nested:
                    s2 = qlora.QuantState(old.state2.shape, old.state2.dtype, "dynamic", absmax=m.qs_absmax2, code=m.qs_code2)
                    s2.blocksize = qlora.NESTED_BLOCK
                m.weight.quant_state = qlora.QuantState(old.shape, old.dtype, old.quant_type, absmax=m.qs_absmax,
                                                        code=m.qs_code, offset=getattr(m, "qs_offset", None), state2=s2)
        return model(input_ids=ids, labels=ids).loss

    def test_forward_saves_as_cuda_autocast(self):
        for ckpt in ("none", "full"):
            with self.subTest(ckpt=ckpt):
                make = self.make(ckpt)

                def keep_state():
                    o = make()
                    for m in o[0].modules():
                        if isinstance(m, qlora.Linear4bit):
                            m.qs = m.weight.quant_state
                    return o

                real, real_saved = _real_cuda_autocast(keep_state, self.run_model)
                imit, imit_saved = _imitated_autocast(keep_state, self.run_model)
                self.assertEqual(imit.dtype, real.dtype)
                self.assertEqual(imit_saved, real_saved)
                self.assertGreater(len(real_saved), 0)
                dtypes = {d for _, d, _ in real_saved}
                if ckpt == "none":
                    # The fp32 residual stream's norms and MLP, and the bf16 casts autocast makes
                    # for the adapters and the eager attention's matmuls.
                    self.assertLessEqual({"float32", "bfloat16"}, dtypes)


if __name__ == "__main__":
    unittest.main()
