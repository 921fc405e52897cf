"""Tests of the LitGPT stack of the oracle on a tiny LitGPT Llama.

They need litgpt (oracle/litgpt-requirements.lock): .ci/run runs them in that
environment, where a skip is a failure. In the HF stack's environment (no
litgpt) they skip.

    lit=$(scripts/python-env.sh oracle/litgpt-requirements.lock)
    "$lit/bin/python" -m unittest discover -s oracle -t . -p test_litgptstep.py -v
"""

import dataclasses
import importlib.util
import unittest

HAVE_LITGPT = importlib.util.find_spec("litgpt") is not None and importlib.util.find_spec("torch") is not None

if HAVE_LITGPT:
    from oracle import litgptstep
    from oracle.fakestep import NotSimulated, Request

# 2 layers, n_embd 64, 4 query heads and 2 key/value groups of 16, MLP 128,
# vocab 256, on LitGPT's Llama-2 config (RMSNorm, LLaMAMLP, RoPE).
TINY = dict(n_layer=2, n_embd=64, n_head=4, n_query_groups=2, head_size=16, intermediate_size=128,
            vocab_size=256, padded_vocab_size=256, block_size=128)
NAME = "Llama-2-7b-hf"


def r512(n):
    return (n + 511) // 512 * 512


H, I, V, KV = 64, 128, 256, 2 * 16
# Per block: qkv (fused), proj, fc_1, fc_2, mlp proj, two norms.
BLOCK = [(4 * 16 + 2 * KV) * H, H * H, I * H, I * H, H * I, H, H]


def params_bf16():
    return 2 * r512(V * H * 2) + r512(H * 2) + 2 * sum(r512(n * 2) for n in BLOCK)


@unittest.skipUnless(HAVE_LITGPT, "litgpt is not installed (run in oracle/litgpt-requirements.lock's environment)")
class TinyLitGPT(unittest.TestCase):
    def run_req(self, max_micro=2, **kw):
        req = Request.from_json(kw)
        return litgptstep.simulate(NAME, req, config_overrides=TINY, max_micro=max_micro)

    def test_full_bytes_by_hand(self):
        r = self.run_req(method="full", precision="bf16-true", seq_len=32, batch=2)
        self.assertEqual(r.params_bytes, params_bf16())
        self.assertEqual(r.trainable_params_bytes, params_bf16())
        self.assertEqual(r.grads_bytes, params_bf16())
        self.assertEqual(r.optimizer_state_bytes, 2 * params_bf16())  # bf16 exp_avg, exp_avg_sq; step on the CPU

    def test_lora_adapters_are_bf16_on_query_and_value(self):
        r = self.run_req(method="lora", precision="bf16-true", lora_rank=8, lora_targets=["q_proj", "v_proj"],
                         seq_len=32, batch=1)
        # LitGPT's fused qkv LoRA: A is (2r x in) for the two enabled slices,
        # B is (q + v out x r); created under the plugin's bf16 default dtype.
        a, b = 2 * 8 * H, (4 * 16 + KV) * 8
        per_block = r512(a * 2) + r512(b * 2)
        self.assertEqual(r.trainable_params_bytes, 2 * per_block)
        self.assertEqual(r.trainable_params, 2 * (a + b))
        self.assertEqual(r.grads_bytes, r.trainable_params_bytes)
        self.assertEqual(r.optimizer_state_bytes, 2 * r.trainable_params_bytes)

    def test_phase_peaks_are_consistent(self):
        for method in ("full", "lora"):
            with self.subTest(method=method):
                r = self.run_req(method=method, precision="bf16-true", lora_rank=4, lora_targets=["all"],
                                 seq_len=64, batch=2, grad_accum=2)
                self.assertEqual(set(r.phase_peak_bytes), {"validate", "forward", "loss", "backward", "optimizer"})
                self.assertEqual(r.peak_bytes, max(r.phase_peak_bytes.values()))
                for ph, v in r.phase_peak_bytes.items():
                    self.assertGreaterEqual(v, r.params_bytes, ph)
                # The step holds weights, gradients and both moments at once.
                self.assertGreaterEqual(r.phase_peak_bytes["optimizer"],
                                        r.params_bytes + r.grads_bytes + r.optimizer_state_bytes)
                self.assertGreater(r.phase_peak_bytes["backward"], r.params_bytes + r.grads_bytes)
                # No grad in validation: it stays below the training forward plus its saved tensors.
                self.assertLess(r.phase_peak_bytes["validate"], r.phase_peak_bytes["backward"])

    def test_deterministic(self):
        kw = dict(method="lora", precision="bf16-true", lora_rank=8, lora_targets=["query_key_value", "lm_head"],
                  lora_dropout=0.05, seq_len=48, batch=3)
        a, b = self.run_req(**kw), self.run_req(**kw)
        strip = lambda r: {k: v for k, v in dataclasses.asdict(r).items() if not k.endswith("_s")}
        self.assertEqual(strip(a), strip(b))

    def test_third_micro_batch_repeats_the_second(self):
        kw = dict(method="lora", precision="bf16-true", lora_rank=8, lora_targets=["q_proj", "v_proj"],
                  seq_len=64, batch=2, grad_accum=3)
        two, three = self.run_req(max_micro=2, **kw), self.run_req(max_micro=3, **kw)
        self.assertEqual(two.micro_batches_run, 2)
        self.assertEqual(three.micro_batches_run, 3)
        self.assertEqual(two.peak_bytes, three.peak_bytes)
        self.assertEqual(two.phase_peak_bytes, three.phase_peak_bytes)

    def test_fabric_hands_the_loss_fp32_logits(self):
        import torch

        req = Request.from_json(dict(method="lora", precision="bf16-true", lora_rank=8, lora_targets=["q_proj"], seq_len=64, batch=2))
        b = litgptstep.build(NAME, req, config_overrides=TINY)
        ids = torch.zeros((2, 64), dtype=torch.long, device="meta")
        with litgptstep._cuda_path():
            out = litgptstep._fabric_forward(b.model, b.plugin, ids, lm_head_chunk_size=128)
            inner = b.model(ids)
        self.assertEqual([t.dtype for t in out], [torch.float32])
        self.assertEqual(inner.dtype, torch.bfloat16)  # the module itself computes in bf16

    def test_previous_logits_live_through_the_next_forward(self):
        # fit() assigns logits = model(...) each iteration: the previous
        # micro-batch's logits (and its scalar loss) are released only once
        # the next forward has returned.
        kw = dict(method="lora", precision="bf16-true", lora_rank=8, lora_targets=["q_proj"], seq_len=64, batch=2)
        one = litgptstep.simulate(NAME, Request.from_json(dict(grad_accum=1, **kw)), steps=1, config_overrides=TINY)
        two = litgptstep.simulate(NAME, Request.from_json(dict(grad_accum=2, **kw)), steps=1, config_overrides=TINY)
        logits = r512(2 * 64 * V * 4)  # batch x seq x vocab, fp32 (Fabric converts the output)
        self.assertEqual(two.phase_peak_bytes["forward"] - one.phase_peak_bytes["forward"],
                         logits + one.grads_bytes + 512)
        # Released when the new logits are assigned: the loss phase only
        # carries the accumulated gradients and the old loss.
        self.assertEqual(two.phase_peak_bytes["loss"] - one.phase_peak_bytes["loss"], one.grads_bytes + 512)

    def test_longer_sequences_and_dropout_cost_more(self):
        base = dict(method="lora", precision="bf16-true", lora_rank=8, lora_targets=["all"], batch=2)
        short, long = self.run_req(seq_len=32, **base), self.run_req(seq_len=128, **base)
        self.assertGreater(long.phase_peak_bytes["backward"], short.phase_peak_bytes["backward"])
        drop = self.run_req(seq_len=128, lora_dropout=0.1, **base)
        self.assertGreater(drop.phase_peak_bytes["backward"], long.phase_peak_bytes["backward"])

    def test_checkpointing_saves_activations(self):
        base = dict(method="full", precision="bf16-true", seq_len=128, batch=4)
        none, full = self.run_req(grad_ckpt="none", **base), self.run_req(grad_ckpt="full", **base)
        self.assertLess(full.phase_peak_bytes["loss"], none.phase_peak_bytes["loss"])

    def test_refusals(self):
        for kw in (dict(method="qlora"), dict(precision="bf16-mixed"), dict(optimizer="sgd"),
                   dict(sharding="fsdp_full_shard", num_gpus=2)):
            with self.subTest(**kw):
                with self.assertRaises(NotSimulated):
                    self.run_req(**{"method": "lora", "seq_len": 32, **kw})
        with self.assertRaisesRegex(ValueError, "lora_targets"):
            self.run_req(method="lora", lora_targets=["nonsense"], seq_len=32)
        with self.assertRaisesRegex(ValueError, "block size"):
            self.run_req(method="full", seq_len=4096)

    def test_dropout_saves_a_bool_mask_as_on_cuda(self):
        import torch

        from oracle.fakestep import LiveBytes

        n = 4096
        x = torch.zeros(n, dtype=torch.bfloat16, device="meta", requires_grad=True)
        live = LiveBytes()
        with litgptstep._cuda_path(), live:
            y = torch.nn.functional.dropout(x, 0.1, True)
            kept = live.cur
            z = torch.nn.functional.dropout(x, 0.1, False)  # eval: the input itself
        # The output in bf16 and the fused kernel's one-byte mask; the
        # unfused path ATen takes on meta would keep a bf16 noise tensor.
        self.assertEqual(kept, r512(2 * n) + r512(n))
        self.assertEqual(live.cur, kept)
        self.assertIs(z, x)
        y.sum().backward()
        self.assertEqual(x.grad.shape, x.shape)

    # QLoRA: Fabric's BitsandbytesPrecision, oracle/qlora.py's 4-bit storage,
    # bitsandbytes' PagedAdamW.

    def qlora(self, quant="nf4", seq_len=32, grad_accum=1, **kw):
        req = litgptstep.LitRequest.from_json(dict(method="qlora", quant=quant, optimizer="paged_adamw_32bit",
                                                   lora_rank=8, lora_targets=["q_proj", "v_proj"], seq_len=seq_len, batch=2,
                                                   grad_accum=grad_accum))
        return req, litgptstep.build(NAME, req, config_overrides=TINY, **kw)

    def test_qlora_quantizes_every_linear_including_head_and_lora_bases(self):
        import torch

        from oracle import qlora

        for quant in ("nf4", "nf4-dq"):
            with self.subTest(quant=quant):
                req, b = self.qlora(quant)
                mods = dict(b.model.named_modules())
                self.assertFalse([n for n, m in mods.items() if isinstance(m, torch.nn.Linear)])
                # lm_head and every block's qkv (LoRA'd: its frozen .linear), proj, fc_1, fc_2, mlp proj.
                self.assertEqual(len(b.quantized), 1 + 2 * 5)
                self.assertIn("lm_head.linear", b.quantized)  # litgpt.lora.GPT: a LoRALinear (r 0 when off)
                self.assertIn("transformer.h.0.attn.qkv.linear", b.quantized)
                for n in b.quantized:
                    m = mods[n]
                    self.assertIsInstance(m, qlora.Linear4bit)
                    # _Linear4bit.quantize casts to torch.half before quantize_4bit.
                    self.assertEqual(m.weight.quant_state.dtype, torch.float16)
                    self.assertEqual(m.compute_dtype, torch.bfloat16)
                    self.assertFalse(m.weight.requires_grad)

                # Storage by hand: per quantized layer of n weights, the packed
                # uint8 weight (n/2), the absmax per 64 weights (fp32, or uint8
                # plus the nested fp32 absmax per 256 blocks, a 256-entry fp32
                # code and an fp32 offset), the 16-entry fp32 4-bit code.
                def q_bytes(n):
                    blocks = -(n // -64)
                    if quant == "nf4":
                        return r512((n + 1) // 2) + r512(4 * blocks) + r512(64)
                    return r512((n + 1) // 2) + r512(blocks) + r512(64) + r512(4) + r512(4 * -(blocks // -256)) + r512(1024)

                linears = [V * H] + 2 * BLOCK[:5]
                a, bb = 2 * 8 * H, (4 * 16 + KV) * 8
                # bf16: embedding (the StableEmbedding: its LayerNorm's weight and
                # bias too), final norm, two norms per block, the adapters.
                rest = r512(V * H * 2) + 2 * r512(H * 2) + r512(H * 2) + 2 * (2 * r512(H * 2) + r512(a * 2) + r512(bb * 2))
                got = sum(r512(t.untyped_storage().nbytes()) for t in
                          {t.untyped_storage()._cdata: t for t in list(b.model.parameters()) + list(b.model.buffers())
                           if t.device.type == "meta"}.values())
                # RoPE cos/sin buffers are the model's own, not the quantization's.
                rope = sum(r512(t.untyped_storage().nbytes()) for n, t in b.model.named_buffers() if n in ("cos", "sin"))
                self.assertEqual(got - rope, sum(q_bytes(n) for n in linears) + rest)

    def test_paged_states_are_not_counted(self):
        import torch

        from oracle.fakestep import LiveBytes

        big = torch.zeros(litgptstep.PAGED_MIN_NUMEL, dtype=torch.bfloat16, device="meta", requires_grad=True)
        small = torch.zeros(litgptstep.PAGED_MIN_NUMEL - 1, dtype=torch.bfloat16, device="meta", requires_grad=True)
        frozen = torch.zeros(10, dtype=torch.bfloat16, device="meta")
        for p in (big, small):
            p.grad = torch.zeros_like(p)
        opt = litgptstep.PagedAdamW([big, small, frozen])
        live = LiveBytes()
        with live:
            opt.step()
            opt.step()
        # Only the small parameter's two fp32 states are device tensors.
        self.assertEqual(live.cur, 2 * r512(4 * small.numel()))
        self.assertEqual(live.peak, live.cur)
        self.assertEqual(opt.paged_bytes, 2 * 4 * big.numel())
        self.assertNotIn("state1", opt.state[big])
        self.assertNotIn(frozen, opt.state)
        self.assertEqual(opt.state[small]["step"], 2)

    def test_qlora_run_counts_small_states_and_not_paged_ones(self):
        req, b = self.qlora("nf4-dq", stable_embedding=False)
        r = litgptstep.simulate(NAME, req, built=b)
        # Tiny adapters (< 1e5 elements) get torch.zeros_like states: two fp32 per bf16 weight.
        self.assertEqual(r.optimizer_state_bytes, 2 * sum(r512(p.numel() * 4) for p in b.model.parameters() if p.requires_grad))
        self.assertEqual(r.paged_state_bytes, 0)
        self.assertEqual(r.grads_bytes, r.trainable_params_bytes)
        self.assertEqual(r.peak_bytes, max(r.phase_peak_bytes.values()))
        row = litgptstep.case(NAME, req, r, b)
        self.assertEqual(row["method"], "qlora")
        self.assertEqual(row["quant"]["double_quant"], True)
        self.assertEqual(row["optimizer"], "paged_adamw_32bit")

    def test_old_matmul4bit_keeps_its_input(self):
        import torch

        from oracle.fakestep import LiveBytes

        for saves, cls in ((False, litgptstep.qlora.Linear4bit), (True, litgptstep.Linear4bitSavesInput)):
            with self.subTest(saves_input=saves):
                w = torch.empty((128, 64), dtype=torch.half, device="meta")
                layer = cls(64, 128, False, torch.bfloat16, "nf4", w)
                leaf = torch.zeros((4, 64), dtype=torch.bfloat16, device="meta", requires_grad=True)
                live = LiveBytes()
                with live:
                    x = leaf * 2  # mul by a scalar saves nothing: x lives only while referenced
                    y = layer(x)
                    before = live.cur
                    del x
                    after = live.cur
                    y.sum().backward()
                self.assertEqual(before - after, 0 if saves else r512(4 * 64 * 2))
                self.assertEqual(leaf.grad.shape, leaf.shape)

    def test_old_matmul4bit_stash_outlives_the_backward(self):
        # ctx.tensors is not save_for_backward: the backward does not free it,
        # and fit()'s loop keeps the previous micro-batch's graph (through
        # logits and loss) until the next forward returns, so the previous
        # inputs are live through the next forward; a shorter later batch
        # leaves the first iteration's peak as the peak.
        def fwd(saves, accum, later=None):
            req, b = self.qlora("nf4", seq_len=64, grad_accum=accum, stable_embedding=False, bnb_saves_input=saves)
            return litgptstep.simulate(NAME, req, built=b, steps=1, later_seq_len=later)

        grow_old = fwd(True, 2).phase_peak_bytes["forward"] - fwd(True, 1).phase_peak_bytes["forward"]
        grow_new = fwd(False, 2).phase_peak_bytes["forward"] - fwd(False, 1).phase_peak_bytes["forward"]
        # At least the previous batch's MLP-projection inputs (2 x 64 x 128 bf16) per block.
        self.assertGreaterEqual(grow_old - grow_new, 2 * r512(2 * 64 * I * 2))
        short = fwd(True, 2, later=16)
        self.assertEqual(short.later_seq_len, 16)
        self.assertLess(short.peak_bytes, fwd(True, 2).peak_bytes)

    def test_stable_embedding_of_the_current_script(self):
        req, b = self.qlora("nf4", stable_embedding=True)
        self.assertIsInstance(b.model.transformer.wte, litgptstep.StableEmbedding)
        self.assertEqual(len(b.kept), 1)  # main()'s old_embedding
        opt_ids = {id(p) for p in b.opt_params}
        self.assertNotIn(id(b.model.transformer.wte.weight), opt_ids)
        r = litgptstep.simulate(NAME, req, built=b)
        _, old = self.qlora("nf4", stable_embedding=False)
        r_old = litgptstep.simulate(NAME, req, built=old)
        # Trainable now: the new embedding and its LayerNorm (bf16), whose gradients stay.
        self.assertEqual(r.grads_bytes - r_old.grads_bytes, r512(V * H * 2) + 2 * r512(H * 2))
        self.assertEqual(r.optimizer_state_bytes, r_old.optimizer_state_bytes)
        self.assertGreater(r.peak_bytes, r_old.peak_bytes + r512(V * H * 2))

    def test_switches(self):
        self.assertEqual(litgptstep.lora_switches(["query_key_value"]),
                         dict(query=True, key=False, value=True, projection=False, mlp=False, head=False))
        self.assertEqual(litgptstep.lora_switches(["q_proj", "o_proj", "down_proj", "lm_head"]),
                         dict(query=True, key=False, value=False, projection=True, mlp=True, head=True))

    def test_census_reads_without_changing_the_run(self):
        kw = dict(method="lora", precision="bf16-true", lora_rank=8, lora_targets=["q_proj", "v_proj"],
                  lora_dropout=0.05, seq_len=32, batch=2)
        plain = self.run_req(**kw)
        cen = {}
        req = Request.from_json(kw)
        over = dict(TINY, n_layer=3)
        with_census = litgptstep.simulate(NAME, req, config_overrides=over, census=cen)
        again = litgptstep.simulate(NAME, req, config_overrides=over)
        self.assertEqual(with_census.peak_bytes, again.peak_bytes)
        self.assertEqual(len(cen["blocks"]), 3)
        # Blocks after the first read an input that needs a gradient: the
        # same tensors each; the first saves less (no dropout mask on the
        # frozen embeddings' norm, no fp32 copy of its input).
        self.assertEqual(cen["blocks"][1], cen["blocks"][2])
        self.assertLess(sum(cen["blocks"][0].values()), sum(cen["blocks"][1].values()))
        self.assertIn("native_dropout bool", cen["blocks"][1])
        self.assertNotIn("native_dropout bool", cen["blocks"][0])
        # The loss's log-softmax over the fp32 logits of (seq_len - 1) positions.
        self.assertEqual(cen["loss"]["_log_softmax float32"], r512(2 * 31 * V * 4))
        self.assertGreater(plain.peak_bytes, 0)


if __name__ == "__main__":
    unittest.main()
