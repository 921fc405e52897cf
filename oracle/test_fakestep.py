"""Tests of the fake-tensor oracle on a tiny Llama whose bytes are counted by hand.

Run from the repository root: python -m unittest discover -s oracle -t .
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from oracle import fakestep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# 2 layers, hidden 64, vocab 256, 4 query heads and 2 key/value heads of 16.
TINY = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 256,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    "hidden_act": "silu",
}


def r512(n):
    return (n + 511) // 512 * 512


# Every parameter is its own storage, rounded up to 512 bytes (bf16: 2 bytes).
H, I, V, KV = 64, 128, 256, 2 * 16
LAYER_SHAPES = [H * H, KV * H, KV * H, H * H, I * H, I * H, H * I, H, H]  # q k v o gate up down 2 norms


def base(b):
    """Parameter bytes of TINY at b bytes per element."""
    return 2 * r512(V * H * b) + r512(H * b) + 2 * sum(r512(n * b) for n in LAYER_SHAPES)


BASE_BF16 = base(2)
assert BASE_BF16 == 215552, BASE_BF16  # 32768 embed + 32768 head + 512 norm + 2 x 74752


def lora_fp32(rank, shapes):
    """Adapter bytes for (out, in) Linear shapes: A is rank x in, B is out x rank, fp32."""
    return sum(r512(rank * i * 4) + r512(o * rank * 4) for o, i in shapes)


class TinyCase(unittest.TestCase):
    """A directory holding the tiny Llama's config.json, and run_req on it."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="fakestep-")
        with open(os.path.join(cls.dir, "config.json"), "w") as f:
            json.dump(TINY, f)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    def run_req(self, **kw):
        return fakestep.simulate(self.dir, fakestep.Request.from_json(kw))


class Tiny(TinyCase):

    def test_full_bytes_by_hand(self):
        r = self.run_req(method="full", precision="bf16-true", seq_len=32, batch=2)
        self.assertEqual(r.params_bytes, BASE_BF16)
        self.assertEqual(r.trainable_params_bytes, BASE_BF16)
        self.assertEqual(r.grads_bytes, BASE_BF16)
        self.assertEqual(r.optimizer_state_bytes, 2 * BASE_BF16)  # exp_avg, exp_avg_sq in bf16; step on the CPU
        self.assertGreaterEqual(r.peak_bytes, 4 * BASE_BF16)
        self.assertEqual(r.peak_bytes, max(r.phase_peak_bytes.values()))
        self.assertEqual(set(r.phase_peak_bytes), {"forward", "loss", "backward", "optimizer"})

    def test_own_loss_in_logits_dtype(self):
        # A plain loop's F.cross_entropy on the bf16 logits (stack pytorch)
        # holds 2 B a logit for the saved log-softmax and each of its two
        # gradients, where transformers' loss upcasts to fp32 (4 B each):
        # the backward's peak is 6 B a logit lower. Under autocast the loop's
        # own region is not imitated: refused.
        kw = dict(method="lora", precision="bf16-true", seq_len=64, batch=2)  # no checkpointing: the loss chain sets the peak
        hf = self.run_req(**kw)
        own = self.run_req(stack="pytorch", frees_logits=True, **kw)
        held = self.run_req(stack="pytorch", **kw)
        logits = 64 * 2 * TINY["vocab_size"]
        self.assertEqual(hf.phase_peak_bytes["backward"] - own.phase_peak_bytes["backward"], 6 * logits)
        # The inline loop's variable keeps the 2 B logits through the backward.
        self.assertEqual(held.phase_peak_bytes["backward"] - own.phase_peak_bytes["backward"], 2 * logits)
        self.assertEqual(own.params_bytes, hf.params_bytes)
        self.assertNotEqual(fakestep.case_id("m", fakestep.Request.from_json(dict(stack="pytorch", **kw))),
                            fakestep.case_id("m", fakestep.Request.from_json(kw)))
        with self.assertRaises(fakestep.NotSimulated):
            fakestep.Request.from_json(dict(kw, precision="bf16-mixed", stack="pytorch"))
        with self.assertRaises(fakestep.NotSimulated):
            fakestep.Request.from_json(dict(kw, stack="litgpt"))

    def test_fp32_doubles_state(self):
        r = self.run_req(method="full", precision="fp32", seq_len=32)
        self.assertEqual(r.params_bytes, base(4))
        self.assertEqual(base(4), 428544)  # norms stay one 512-byte block each
        self.assertEqual(r.grads_bytes, base(4))
        self.assertEqual(r.optimizer_state_bytes, 2 * base(4))

    def test_lora_only_adapters_train(self):
        rank = 4
        r = self.run_req(method="lora", lora_rank=rank, lora_targets=["attention"], seq_len=32)
        attn = [(H, H), (KV, H), (KV, H), (H, H)]
        adapters = 2 * lora_fp32(rank, attn)
        self.assertEqual(adapters, 14336)
        self.assertEqual(r.lora_targets, ["q_proj", "k_proj", "v_proj", "o_proj"])
        self.assertEqual(r.adapter_dtype, "float32")  # PEFT upcasts adapters of a bf16 model
        self.assertEqual(r.params_bytes, BASE_BF16 + adapters)
        self.assertEqual(r.trainable_params_bytes, adapters)
        self.assertEqual(r.grads_bytes, adapters)
        self.assertEqual(r.optimizer_state_bytes, 2 * adapters)
        self.assertGreaterEqual(r.peak_bytes, BASE_BF16 + 4 * adapters)

    def test_lora_all_linear_targets(self):
        r = self.run_req(method="lora", lora_rank=2, lora_targets=["all-linear"], seq_len=16)
        self.assertEqual(r.lora_targets, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
        want = 2 * lora_fp32(2, [(H, H), (KV, H), (KV, H), (H, H), (I, H), (I, H), (H, I)])
        self.assertEqual(r.trainable_params_bytes, want)

    def test_sdpa_keeps_no_probabilities(self):
        # Eager attention saves the seq x seq probabilities of every layer;
        # the CUDA flash kernel the oracle imitates keeps an fp32 logsumexp.
        s = 256
        sdpa = self.run_req(method="full", seq_len=s, attn="sdpa")
        eager = self.run_req(method="full", seq_len=s, attn="eager")
        probs = 4 * s * s * 2  # one layer's heads x seq x seq in bf16
        self.assertGreaterEqual(eager.phase_peak_bytes["backward"] - sdpa.phase_peak_bytes["backward"], probs)

    def test_sdpa_math_keeps_16bit_probabilities(self):
        # attn sdpa_math: SDPA's composite math kernel as torch before 2.5
        # ran it, whose softmax output (bf16, one per head) the value matmul
        # saves; eager keeps an fp32 softmax and its bf16 cast instead.
        kw = {"method": "lora", "lora_rank": 4, "lora_targets": ["attention"], "seq_len": 32, "batch": 2}
        math = fakestep.simulate(self.dir, fakestep.Request.from_json({**kw, "attn": "sdpa_math"}), census=True)
        probs = 2 * 4 * 32 * 32  # batch x heads x seq x seq, per layer
        self.assertEqual(math.saved_by_op["_safe_softmax bfloat16"], 2 * probs * 2)
        self.assertNotIn("_softmax float32", math.saved_by_op)

    def test_dropout_saves_a_bool_mask(self):
        # PEFT's lora_dropout on CUDA runs the fused kernel (a one-byte mask
        # saved); on meta ATen would save a bf16 noise tensor instead.
        import torch

        n = 4096
        x = torch.zeros(n, dtype=torch.bfloat16, device="meta", requires_grad=True)
        live = fakestep.LiveBytes()
        with fakestep._patched(), live:
            y = torch.nn.Dropout(0.1)(x)
        self.assertEqual(live.cur, r512(2 * n) + r512(n))
        self.assertEqual(y.shape, x.shape)

    def test_checkpointing_lowers_forward(self):
        s = 256
        plain = self.run_req(method="lora", seq_len=s, batch=4)
        ckpt = self.run_req(method="lora", seq_len=s, batch=4, grad_ckpt="full")
        self.assertLess(ckpt.phase_peak_bytes["forward"], plain.phase_peak_bytes["forward"])

    def test_census_names_saved_tensors(self):
        # What the forward leaves for the backward, by creating operator, as
        # docs/memory-model.md spells it out for transformers' Llama layer
        # (64 tokens, every storage here a multiple of 512 bytes).
        t = 2 * 32
        lora = fakestep.simulate(self.dir, fakestep.Request.from_json(
            {"method": "lora", "lora_rank": 4, "lora_targets": ["attention"], "seq_len": 32, "batch": 2}), census=True)
        saved = lora.saved_by_op
        # fp32 copies: each layer's two RMSNorm inputs and PEFT's cast of
        # each adapted module's input (q, k, v, o: one copy per module
        # although q, k and v read one tensor). The final norm keeps none
        # under LoRA (it does under full fine-tuning, below).
        self.assertEqual(saved["_to_copy float32"], (2 * 2 + 2 * 4) * t * H * 4)
        # the stock loss: fp32 log-softmax of the logits.
        self.assertEqual(saved["_log_softmax float32"], t * V * 4)
        # gated MLP: gate and up (mm outputs of the frozen projections) and
        # silu's output; the frozen down_proj saves no input.
        self.assertEqual(saved["silu bfloat16"], 2 * t * I * 2)
        self.assertNotIn("_softmax float32", saved)
        eager = fakestep.simulate(self.dir, fakestep.Request.from_json(
            {"method": "lora", "lora_rank": 4, "lora_targets": ["attention"], "seq_len": 32, "batch": 2, "attn": "eager"}), census=True)
        # eager attention: the fp32 softmax of every layer and its bf16 cast.
        probs = 2 * 4 * 32 * 32  # batch x heads x seq x seq
        self.assertEqual(eager.saved_by_op["_softmax float32"], 2 * probs * 4)
        # (+ cos and sin cast to bf16 once, which rotary's multiplies save)
        cos_sin = 2 * r512(32 * 16 * 2)
        self.assertEqual(eager.saved_by_op["_to_copy bfloat16"], 2 * probs * 2 + cos_sin)
        # key and value repeated per query head (repeat_kv) for the matmuls.
        self.assertGreaterEqual(eager.saved_by_op["clone bfloat16"], 2 * 2 * t * H * 2)
        full = fakestep.simulate(self.dir, fakestep.Request.from_json(
            {"method": "full", "seq_len": 32, "batch": 2}), census=True)
        # full fine-tuning: the five norms' fp32 inputs, final included.
        self.assertEqual(full.saved_by_op["_to_copy float32"], 5 * t * H * 4)
        self.assertIsNone(self.run_req(method="lora", seq_len=32).saved_by_op)

    def test_not_simulated(self):
        for kw in ({"method": "qlora", "quant": "int8"}, {"method": "qlora", "precision": "fp32"}, {"precision": "fp16-mixed"}, {"optimizer": "adamw_8bit"}, {"fused_ce": "liger"},
                   {"task": "sequence-classification"}, {"task": "seq2seq-lm", "target_len": 128},
                   {"kernels": ["liger-rmsnorm"]}, {"compile": True}, {"optimizer_in_backward": True}):
            with self.subTest(kw=kw), self.assertRaises(fakestep.NotSimulated):
                fakestep.Request.from_json(kw)
        with self.assertRaises(ValueError):
            fakestep.Request.from_json({"seq_len": 0})
        with self.assertRaisesRegex(fakestep.NotSimulated, "task 'sequence-classification'"):
            fakestep.Request.from_json({"task": "sequence-classification"})
        # A misspelt field is an error naming it, not a default used in silence.
        with self.assertRaisesRegex(ValueError, "request field 'grad_ckp': unknown"):
            fakestep.Request.from_json({"grad_ckp": "full"})
        # estimate --json's causal-LM task is the oracle's own, and leaves the case id alone.
        self.assertEqual(fakestep.case_id("m", fakestep.Request.from_json({"task": "causal-lm"})),
                         fakestep.case_id("m", fakestep.Request.from_json({})))


class FlashAttention2(TinyCase):
    """transformers' flash_attention_2 path over the imitated flash-attn package."""

    def test_saves_as_sdpa_flash(self):
        # 16-bit q, k, v with grouped heads and no mask: SDPA's flash kernel and
        # flash-attn keep the same tensors (q, k and v unrepeated, the output,
        # an fp32 logsumexp) but for the RNG state: SDPA two scalar tensors
        # (philox seed and offset), flash-attn one of two elements, so one
        # 512-byte block less for each layer whose tensors are saved at the peak
        # (2 layers; 1 recomputed under checkpointing).
        for kw in ({"method": "lora", "precision": "bf16-true"}, {"method": "full", "precision": "bf16-mixed"},
                   {"method": "lora", "precision": "bf16-true", "grad_ckpt": "full"}):
            with self.subTest(**kw):
                a = self.run_req(attn="flash_attention_2", seq_len=32, batch=2, **kw)
                b = self.run_req(attn="sdpa", seq_len=32, batch=2, **kw)
                layers = 1 if kw.get("grad_ckpt") == "full" else TINY["num_hidden_layers"]
                self.assertEqual(b.phase_peak_bytes["backward"] - a.phase_peak_bytes["backward"], 512 * layers)

    def test_kernel_gets_16_bit_inputs(self):
        import torch

        # A QLoRA base's fp32 stream: transformers casts q, k and v to the
        # quantized model's dtype (config._is_quantized, set as the quantizer
        # does) before the kernel, which saves those casts.
        seen = []
        real = fakestep._FlashAttnFunc.apply

        def spy(q, k, v, *rest):
            seen.append((q.dtype, k.dtype, v.dtype))
            return real(q, k, v, *rest)

        fakestep._FlashAttnFunc.apply = spy
        try:
            self.run_req(method="qlora", precision="bf16-true", attn="flash_attention_2", seq_len=32, batch=2)
        finally:
            fakestep._FlashAttnFunc.apply = real
        self.assertGreater(len(seen), 0)
        self.assertEqual(set(seen), {(torch.bfloat16,) * 3})

    def test_refused(self):
        with self.assertRaisesRegex(fakestep.NotSimulated, "fp32"):
            fakestep.Request.from_json({"attn": "flash_attention_2", "precision": "fp32"})
        req = fakestep.Request.from_json({"attn": "flash_attention_2", "seq_len": 32})
        from transformers import LlamaForCausalLM

        old = LlamaForCausalLM._supports_flash_attn
        LlamaForCausalLM._supports_flash_attn = False
        try:
            with self.assertRaisesRegex(fakestep.NotSimulated, "_supports_flash_attn"):
                fakestep.build(self.dir, req)
        finally:
            LlamaForCausalLM._supports_flash_attn = old


class TinyMoE(unittest.TestCase):
    """A 2-layer Qwen3-MoE and Qwen2-MoE: PEFT maps transformers 4's expert
    names onto Qwen3-MoE's fused expert parameters (target_parameters), which
    the oracle refuses; Qwen2-MoE's mlp scope is its shared expert."""

    CFG = {"hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
           "num_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 512, "tie_word_embeddings": False}

    def config_dir(self, **extra):
        d = tempfile.mkdtemp(prefix="fakestep-moe-")
        self.addCleanup(shutil.rmtree, d)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({**self.CFG, **extra}, f)
        return d

    def test_routed_experts_not_simulated(self):
        d = self.config_dir(model_type="qwen3_moe")
        with self.assertRaises(fakestep.NotSimulated):
            fakestep.simulate(d, fakestep.Request.from_json({"method": "lora", "lora_targets": ["gate_proj", "up_proj"], "seq_len": 32}))
        # PEFT's all-linear reaches them too (the nn.Linear leaves alone
        # would be the attention).
        with self.assertRaises(fakestep.NotSimulated):
            fakestep.simulate(d, fakestep.Request.from_json({"method": "lora", "lora_targets": ["all-linear"], "seq_len": 32}))
        res = fakestep.simulate(d, fakestep.Request.from_json({"method": "lora", "lora_targets": ["attention"], "seq_len": 32}))
        self.assertEqual(sorted(res.lora_targets), ["k_proj", "o_proj", "q_proj", "v_proj"])

    def test_shared_expert_scope(self):
        d = self.config_dir(model_type="qwen2_moe", shared_expert_intermediate_size=48)
        res = fakestep.simulate(d, fakestep.Request.from_json({"method": "lora", "lora_targets": ["mlp"], "seq_len": 32}))
        self.assertEqual(res.lora_targets, ["gate_proj", "up_proj", "down_proj", "shared_expert_gate"])


class CLI(unittest.TestCase):
    def test_rows_validate(self):
        """The command's rows parse, are marked simulated and `canifinetune validate` accepts them."""
        cfg = os.path.join(ROOT, "catalog", "models", "Qwen", "Qwen2.5-0.5B")
        with tempfile.TemporaryDirectory() as d:
            req = os.path.join(d, "req.json")
            with open(req, "w") as f:
                json.dump([{"config": {"method": "lora", "lora_rank": 8, "lora_targets": ["attention"], "seq_len": 64, "batch": 1, "grad_ckpt": "full"}}], f)
            p = subprocess.run([sys.executable, "-m", "oracle.fakestep", cfg, req], cwd=ROOT, capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            lines = p.stdout.splitlines()
            self.assertEqual(len(lines), 1, p.stdout)
            row = json.loads(lines[0])
            self.assertTrue(row["simulated"])
            self.assertTrue(row["id"].startswith("oracle-"))
            self.assertEqual(row["model"], "Qwen/Qwen2.5-0.5B")
            self.assertEqual(row["measured"]["kind"], "allocated")
            self.assertGreater(row["measured"]["gib"], 0.9)  # at least the bf16 weights
            out = os.path.join(d, "oracle.jsonl")
            with open(out, "w") as f:
                f.write(p.stdout)
            go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None)
            if go is None:
                self.skipTest("go not on PATH: validate not run")
            v = subprocess.run([go, "run", "./cmd/canifinetune", "validate", out], cwd=ROOT, capture_output=True, text=True)
            self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
            self.assertIn("scored 1, OOM 0", v.stdout)  # scored, not unsupported

    def test_not_simulated_exit(self):
        with tempfile.TemporaryDirectory() as d:
            req = os.path.join(d, "req.json")
            with open(req, "w") as f:
                json.dump({"method": "qlora", "quant": "int8"}, f)
            cfg = os.path.join(ROOT, "catalog", "models", "Qwen", "Qwen2.5-0.5B")
            p = subprocess.run([sys.executable, "-m", "oracle.fakestep", cfg, req], cwd=ROOT, capture_output=True, text=True)
            self.assertEqual(p.returncode, 1)
            self.assertEqual(p.stdout, "")
            self.assertIn("not simulated: qlora quant 'int8'", p.stderr)


def _saved(fn):
    """Runs fn, returning its result and the tensors autograd saved, in
    order, as (shape, dtype, n) with n numbering distinct storages."""
    import torch

    out, ids = [], {}

    def pack(t):
        out.append((tuple(t.shape), str(t.dtype).removeprefix("torch."), ids.setdefault(t.untyped_storage()._cdata, len(ids))))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        r = fn()
    return r, out


def _real_cuda_autocast(make, run):
    """make() builds on meta tensors; every parameter, buffer and input is
    then swapped for a fake CUDA tensor of the same layout, and run(obj)
    runs under the real torch.autocast("cuda", bfloat16), whose kernels cast
    CUDA tensors (no GPU is needed for the forward: the tensors are fakes).
    The autograd engine cannot run their backward without a device, so only
    what the forward saves is compared."""
    import torch
    import torch.cuda.amp.common as amp_common
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    old = amp_common.amp_definitely_not_available, torch.cuda.is_bf16_supported
    amp_common.amp_definitely_not_available, torch.cuda.is_bf16_supported = (lambda: False), (lambda *a, **k: True)
    mode = FakeTensorMode()
    cuda = torch.device("cuda", 0)

    def fake(t):
        f = FakeTensor(mode, t.detach(), cuda)
        return f.requires_grad_() if t.requires_grad else f

    with torch.device("meta"):
        obj = make()
    for x in obj:
        if isinstance(x, torch.nn.Module):
            for m in x.modules():
                for k, p in m._parameters.items():
                    if p is not None:
                        m._parameters[k] = torch.nn.Parameter(fake(p), requires_grad=p.requires_grad)
                for k, b in m._buffers.items():
                    if b is not None:
                        m._buffers[k] = fake(b)
    obj = tuple(fake(x) if isinstance(x, torch.Tensor) else x for x in obj)
    try:
        with mode, fakestep._patched():

            def f():
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    return run(obj)

            return _saved(f)
    finally:
        amp_common.amp_definitely_not_available, torch.cuda.is_bf16_supported = old


def _imitated_autocast(make, run):
    """The same on meta tensors through the oracle's autocast imitation."""
    import torch

    with torch.device("meta"):
        obj = make()
    with fakestep._patched(), fakestep._autocast_patches(torch.bfloat16):
        def f():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return run(obj)

        return _saved(f)


class Autocast(unittest.TestCase):
    """bf16-mixed: what the imitation saves against what CUDA autocast's own
    kernels save (shapes, dtypes, and which saved tensors share a storage)."""

    def compare(self, make, run):
        real, real_saved = _real_cuda_autocast(make, run)
        imit, imit_saved = _imitated_autocast(make, run)
        self.assertEqual(imit.dtype, real.dtype)
        self.assertEqual(imit_saved, real_saved)
        self.assertGreater(len(real_saved), 0)
        return real_saved

    def test_linear_and_loss(self):
        import torch

        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a = torch.nn.Linear(16, 32)
                self.frozen = torch.nn.Linear(32, 32, bias=False).requires_grad_(False)
                self.ln = torch.nn.LayerNorm(32)
                self.b = torch.nn.Linear(32, 10, bias=False)

            def forward(self, x, y):
                h = self.ln(self.a(x))
                h = self.frozen(h) + self.frozen(h)  # a frozen weight is cast on every call
                att = torch.softmax(h @ h.transpose(-1, -2), -1)
                z = self.b(att @ h) + self.b(h)  # a trained weight's cast is cached
                z = z ** 2
                return torch.nn.functional.cross_entropy(z.view(-1, 10), y.view(-1))

        def make():
            return M(), torch.empty(2, 5, 16).requires_grad_(), torch.zeros(2, 5, dtype=torch.long)

        saved = self.compare(make, lambda o: o[0](o[1], o[2]))
        # What CUDA autocast saves here: the linear inputs and weights cast
        # to bf16, pow's input cast to fp32, LayerNorm in fp32, softmax's
        # output in fp32 (then cast for the matmul).
        dtypes = {d for _, d, _ in saved}
        self.assertEqual(dtypes, {"bfloat16", "float32", "int64"})
        b_weight = [n for s, d, n in saved if s == (32, 10) and d == "bfloat16"]
        self.assertEqual(len(b_weight), 2)
        self.assertEqual(len(set(b_weight)), 1)  # one cached cast, saved by both uses
        frozen = [n for s, d, n in saved if s == (32, 32) and d == "bfloat16"]
        self.assertEqual(len(set(frozen)), 2)  # not cached: no grad

    def tiny_model(self, method, cfg, dtype="float32"):
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        def make():
            d = tempfile.mkdtemp(prefix="fakestep-")
            try:
                with open(os.path.join(d, "config.json"), "w") as f:
                    json.dump(cfg, f)
                c = AutoConfig.from_pretrained(d)
            finally:
                shutil.rmtree(d)
            m = AutoModelForCausalLM.from_config(c, dtype=getattr(torch, dtype), attn_implementation="eager")
            if method == "lora":
                from peft import LoraConfig, get_peft_model

                m = get_peft_model(m, LoraConfig(r=4, lora_alpha=8, target_modules=fakestep.lora_targets(m, ["all-linear"]), task_type="CAUSAL_LM"))
            m.config.use_cache = False
            m.train()
            return m, torch.zeros((2, 16), dtype=torch.long)

        return make

    def test_transformers_forward(self):
        gpt2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2,
                "n_positions": 64, "vocab_size": 256, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
        for name, cfg in (("llama", TINY), ("gpt2", gpt2)):
            # full on fp32 weights; LoRA on fp32 and on bf16 weights (fp32 adapters)
            for method, dtype in (("full", "float32"), ("lora", "float32"), ("lora", "bfloat16")):
                with self.subTest(model=name, method=method, dtype=dtype):
                    saved = self.compare(self.tiny_model(method, cfg, dtype), lambda o: o[0](input_ids=o[1], labels=o[1]).loss)
                    self.assertIn("bfloat16", {d for _, d, _ in saved})

    def test_sdpa_inputs_cast(self):
        # scaled_dot_product_attention is on autocast's lower-precision list:
        # fp32 q and k (rotary with fp32 cos/sin) are cast to bf16, so CUDA
        # picks the flash kernel, which saves bf16 q, k, v, its output and an
        # fp32 logsumexp.
        import torch

        with torch.device("meta"):
            q = torch.empty(2, 4, 16, 16, requires_grad=True)
            v = torch.empty(2, 4, 16, 16, dtype=torch.bfloat16, requires_grad=True)
        with fakestep._patched(), fakestep._autocast_patches(torch.bfloat16):
            def f():
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    return torch.nn.functional.scaled_dot_product_attention(q, q, v, is_causal=True)

            out, saved = _saved(f)
        self.assertEqual(out.dtype, torch.bfloat16)
        self.assertEqual(sum(d == "float32" for _, d, _ in saved), 1)  # the logsumexp
        self.assertEqual(sum(d == "bfloat16" for _, d, _ in saved), 4)

    def test_mixed_run(self):
        d = tempfile.mkdtemp(prefix="fakestep-")
        try:
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(TINY, f)
            full = fakestep.simulate(d, fakestep.Request.from_json({"method": "full", "precision": "bf16-mixed", "seq_len": 32, "batch": 2}))
            # fp32 master weights, fp32 gradients and AdamW states, as HF Trainer keeps them.
            self.assertEqual(full.params_bytes, base(4))
            self.assertEqual(full.grads_bytes, base(4))
            self.assertEqual(full.optimizer_state_bytes, 2 * base(4))
            # Checkpointing recomputes each block under the autocast state of
            # the forward; torch.utils.checkpoint raises if the recomputed
            # tensors' dtypes differ from the first pass's.
            for method in ("full", "lora"):
                plain = fakestep.simulate(d, fakestep.Request.from_json({"method": method, "precision": "bf16-mixed", "seq_len": 64, "batch": 2}))
                ckpt = fakestep.simulate(d, fakestep.Request.from_json({"method": method, "precision": "bf16-mixed", "seq_len": 64, "batch": 2, "grad_ckpt": "full"}))
                self.assertLess(ckpt.phase_peak_bytes["forward"], plain.phase_peak_bytes["forward"])
            true = fakestep.simulate(d, fakestep.Request.from_json({"method": "lora", "precision": "bf16-true", "seq_len": 64, "batch": 2}))
            # A LoRA base loads in bf16 (fp32 adapters), as under bf16-true.
            self.assertEqual(plain.params_bytes, true.params_bytes)
            self.assertEqual(plain.adapter_dtype, "float32")
        finally:
            shutil.rmtree(d)


if __name__ == "__main__":
    unittest.main()
