"""QLoRA on fake tensors: bitsandbytes' 4-bit layers as an HF Trainer + PEFT run has them.

bitsandbytes is not installed (its CUDA kernels do not run on meta tensors,
and the oracle's lock does not carry it). This module re-implements, on the
meta device, what its 4-bit path allocates, from the source of
bitsandbytes 0.49.2 (the last release whose MatMul4Bit dequantizes the
whole weight for every matmul; see "Not imitated"), transformers and PEFT
as pinned in requirements.lock:

* Loading (transformers' ``BitsAndBytesConfig(load_in_4bit=True,
  bnb_4bit_quant_type="nf4" or "fp4", bnb_4bit_compute_dtype=bfloat16,
  bnb_4bit_use_double_quant=...)``): every ``nn.Linear`` and GPT-2
  ``Conv1D`` becomes a ``Linear4bit`` unless transformers keeps it
  (``integrations/bitsandbytes.py: replace_with_bnb_linear`` with
  ``HfQuantizer.get_modules_to_not_convert``: the output embeddings, tied
  weights, the last parameter's module, ``_keep_in_fp32_modules``; the
  real functions decide). Embeddings, norms and MoE experts (3-D
  parameters, not ``nn.Linear``) stay in the load dtype.
* A ``Linear4bit``'s storage (``functional.py: quantize_4bit``,
  ``_ops.py``'s fake ``quantize_4bit``/``quantize_blockwise``): the packed
  weight, ``(numel + 1) // 2`` uint8 bytes; one absmax per 64-weight block,
  fp32, or with double quantization uint8 plus, from ``quantize_blockwise``
  on the absmax, one fp32 absmax per 256 blocks, a copy of the 256-entry
  fp32 dynamic code and an fp32 offset scalar; and the 16-entry fp32 4-bit
  code of ``get_4bit_type``. They are registered as non-persistent buffers
  here so that the oracle's counter sees them (bitsandbytes keeps them on
  ``weight.quant_state``); a bias stays a parameter in the load dtype.
* PEFT's ``prepare_model_for_kbit_training`` is the real function: it
  freezes everything and casts every fp16/bf16 parameter whose class is not
  named ``Params4bit`` to fp32 (the embeddings, norms, output layer, biases,
  MoE experts); with checkpointing it enables the input embeddings' output
  gradients (``use_reentrant`` is not in its kwargs) and checkpointing,
  which the Trainer then enables again with transformers' default,
  ``use_reentrant=False``.
* ``Linear4bit.forward`` (``nn/modules.py``): the input cast to the compute
  dtype, the bias cast to it, ``matmul_4bit`` and the output cast back to
  the input's dtype (so an fp32 residual stream stays fp32).
* ``MatMul4Bit`` (``autograd/_functions.py``): the forward dequantizes the
  weight into a temporary of the load dtype (with double quantization
  first an fp32 temporary of the absmax), casts it to the input's dtype,
  multiplies and saves no activation (``ctx.tensors`` holds the packed
  weight only); the backward dequantizes again for the input's gradient.
  ``matmul_4bit``'s inference path (``gemv_4bit`` for one token without
  gradients) is not taken in training.
* PEFT's ``lora/bnb.py: Linear4bit.forward``: the base output cloned, the
  input cast to the adapter's dtype (fp32) when autocast is off, the
  adapter's output scaled and cast back to the base output's dtype, added.
  It is registered through PEFT's custom-module mapping, since PEFT's own
  class exists only when bitsandbytes imports.
* Under autocast (bf16-mixed: HF Trainer's bf16=True over the bf16-loaded
  base) the same code runs inside the oracle's autocast imitation: the
  F.linear in MatMul4Bit's forward meets bf16 inputs (Linear4bit's cast)
  and casts nothing; PEFT skips its fp32 cast of the input, so lora_A's
  F.linear casts the fp32 input to bf16 and saves that cast; the fp32
  output layer and SDPA's inputs are cast as autocast casts them.
  test_qlora.TestAutocast compares what the forward saves with what CUDA
  autocast's own kernels save.

Not imitated: bitsandbytes' CUDA kernels themselves (their workspaces, if
any, are outside torch's counters), the fused ``gemm_4bit`` of
bitsandbytes 0.50 and later (for a matmul of at most 1536 tokens, where
its per-architecture heuristic picks its own kernel for the GPU and the
weight's shape, it skips the forward's dequantized temporary), paged optimizers (their states live in
CUDA unified memory, outside ``max_memory_allocated``), 8-bit
(``load_in_8bit``) bases, ``bnb_4bit_quant_storage`` other than uint8,
fp16 autocast (its GradScaler).
"""

from __future__ import annotations

import torch

BNB_VERSION = "0.49.2"  # the bitsandbytes release whose allocation this imitates
BLOCK = 64  # quantize_4bit's default blocksize
NESTED_BLOCK = 256  # quantize_blockwise's blocksize for the absmax (compress_statistics)
QUANTS = ("nf4", "nf4-dq", "fp4")


class QuantState:
    """functional.py's QuantState: the tensors that undo the quantization."""

    def __init__(self, shape, dtype, quant_type, absmax, code, offset=None, state2=None):
        self.shape, self.dtype, self.quant_type = torch.Size(shape), dtype, quant_type
        self.absmax, self.code, self.offset, self.state2 = absmax, code, offset, state2
        self.blocksize = BLOCK
        self.nested = state2 is not None


class Params4bit(torch.nn.Parameter):
    """The packed weight. PEFT's kbit preparation leaves a parameter alone
    when its class is named Params4bit (peft/utils/other.py)."""

    quant_state: QuantState

    def __new__(cls, data, requires_grad=False):
        return super().__new__(cls, data, requires_grad)


def quantize(weight: torch.Tensor, quant: str) -> tuple[torch.Tensor, QuantState]:
    """The packed weight and quantization state quantize_4bit leaves (meta)."""
    if quant not in QUANTS:
        raise ValueError(f"quant {quant!r}: the 4-bit schemes imitated are {', '.join(QUANTS)}")
    n = weight.numel()
    blocks = -(n // -BLOCK)
    dev = weight.device
    packed = torch.empty(((n + 1) // 2, 1), dtype=torch.uint8, device=dev)  # quant_storage uint8
    code = torch.empty(16, dtype=torch.float32, device=dev)  # get_4bit_type: a fresh 16-entry table
    qt = "fp4" if quant == "fp4" else "nf4"
    if quant == "nf4-dq":
        # compress_statistics: offset = absmax.mean(); quantize_blockwise(absmax - offset,
        # blocksize=256) keeps uint8 absmax, fp32 absmax per 256 blocks and a copy of the dynamic code.
        s2 = QuantState((blocks,), torch.float32, "dynamic",
                        absmax=torch.empty(-(blocks // -NESTED_BLOCK), dtype=torch.float32, device=dev),
                        code=torch.empty(256, dtype=torch.float32, device=dev))
        s2.blocksize = NESTED_BLOCK
        qs = QuantState(weight.shape, weight.dtype, qt, absmax=torch.empty(blocks, dtype=torch.uint8, device=dev),
                        code=code, offset=torch.empty((), dtype=torch.float32, device=dev), state2=s2)
    else:
        qs = QuantState(weight.shape, weight.dtype, qt, absmax=torch.empty(blocks, dtype=torch.float32, device=dev), code=code)
    return packed, qs


def dequantize(B: torch.Tensor, qs: QuantState) -> torch.Tensor:
    """functional.py: dequantize_4bit's allocations: with double quantization
    an fp32 absmax (dequantize_blockwise, then += offset in place), then the
    weight in the dtype it was quantized from, transposed back when B is the
    transposed packed weight."""
    absmax = qs.absmax
    if qs.nested:
        absmax = torch.empty_like(qs.absmax, dtype=torch.float32)
        absmax += qs.offset
    # The kernel reads absmax while it writes out; the fp32 temporary dies on return.
    out = torch.empty(qs.shape, dtype=qs.dtype, device=B.device)
    del absmax
    return out.t() if B.shape[0] == 1 else out


class MatMul4Bit(torch.autograd.Function):
    """autograd/_functions.py: MatMul4Bit (bitsandbytes 0.49.2)."""

    @staticmethod
    def forward(ctx, A, B, bias, qs):
        # torch.nn.functional.linear(A, dequantize_4bit(B, qs).to(A.dtype).t(), bias)
        output = torch.nn.functional.linear(A, dequantize(B, qs).to(A.dtype).t(), bias)
        ctx.state = qs
        ctx.dtype_bias = None if bias is None else bias.dtype
        # Not save_for_backward: the packed weight only, as an attribute; no activation is kept.
        ctx.tensors = (None, B) if any(ctx.needs_input_grad[:2]) else (None, None)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        req_a, _, req_bias, _ = ctx.needs_input_grad
        _, B = ctx.tensors
        grad_a = grad_bias = None
        if req_bias:
            grad_bias = grad_output.sum(0, dtype=ctx.dtype_bias)
        if req_a:
            grad_a = torch.matmul(grad_output, dequantize(B, ctx.state).to(grad_output.dtype).t())
        return grad_a, None, grad_bias, None


class Linear4bit(torch.nn.Module):
    """nn/modules.py: Linear4bit (forward as in bitsandbytes 0.49.2)."""

    matmul = MatMul4Bit  # the autograd function matmul_4bit applies (a subclass may pin an older release's)

    def __init__(self, in_features, out_features, bias, compute_dtype, quant, weight, bias_param=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.compute_dtype = compute_dtype
        self.quant = quant
        packed, qs = quantize(weight, quant)
        self.weight = Params4bit(packed, requires_grad=False)
        self.weight.quant_state = qs
        self.bias = bias_param if bias else None
        # The quantization state, where the oracle's counter sees it.
        self.register_buffer("qs_absmax", qs.absmax, persistent=False)
        self.register_buffer("qs_code", qs.code, persistent=False)
        if qs.nested:
            self.register_buffer("qs_offset", qs.offset, persistent=False)
            self.register_buffer("qs_absmax2", qs.state2.absmax, persistent=False)
            self.register_buffer("qs_code2", qs.state2.code, persistent=False)

    def forward(self, x):
        if self.bias is not None and self.bias.dtype != x.dtype:
            self.bias.data = self.bias.data.to(x.dtype)
        inp_dtype = x.dtype
        if self.compute_dtype is not None:
            x = x.to(self.compute_dtype)
        bias = None if self.bias is None else self.bias.to(self.compute_dtype)
        if x.numel() == x.shape[-1] and not x.requires_grad:
            raise NotImplementedError("bitsandbytes' gemv_4bit inference path (one token, no gradient) is not imitated")
        return self.matmul.apply(x, self.weight.t(), bias, self.weight.quant_state).to(inp_dtype)


def quantize_model(model: torch.nn.Module, quant: str, compute_dtype=torch.bfloat16, skip_modules=None) -> list[str]:
    """replace_with_bnb_linear on a built model: the names it converts."""
    from transformers.pytorch_utils import Conv1D
    from transformers.quantizers.base import HfQuantizer
    from transformers.quantizers.quantizers_utils import should_convert_module

    keep = HfQuantizer.get_modules_to_not_convert(model, skip_modules, getattr(model, "_keep_in_fp32_modules", None))
    done = []
    for name, mod in list(model.named_modules()):
        if not should_convert_module(name, keep):
            continue
        if not (isinstance(mod, Conv1D) or type(mod) is torch.nn.Linear):
            continue
        if isinstance(mod, Conv1D):
            in_f, out_f = mod.weight.shape
            w = mod.weight.t()  # Conv1D stores [in, out]; the quantized weight is [out, in]
        else:
            in_f, out_f, w = mod.in_features, mod.out_features, mod.weight
        new = Linear4bit(in_f, out_f, mod.bias is not None, compute_dtype, quant, w, mod.bias)
        new.requires_grad_(False)
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, new)
        done.append(name)
    model.is_loaded_in_4bit = True
    # The quantizer's postprocess_model marks every PreTrainedModel's config
    # as quantized (the real function): transformers' flash path then casts
    # fp32 q/k/v to the config's dtype (integrations/flash_attention.py).
    from transformers.quantizers.base import _assign_is_quantized

    _assign_is_quantized(model)
    return done


def lora_layer_class():
    """PEFT's lora/bnb.py Linear4bit, on the fake Linear4bit (PEFT defines its
    own only when bitsandbytes imports). Built lazily: peft is imported here."""
    from peft.tuners.lora.layer import Linear as LoraLinear

    class LoraLinear4bit(LoraLinear):
        def forward(self, x, *args, **kwargs):
            self._check_forward_args(x, *args, **kwargs)
            result = self.base_layer(x, *args, **kwargs)
            # "As per Tim Dettmers, for 4bit, we need to defensively clone here."
            result = result.clone()
            for active in self.active_adapters:
                if active not in self.lora_A.keys():
                    continue
                lora_A, lora_B = self.lora_A[active], self.lora_B[active]
                dropout, scaling = self.lora_dropout[active], self.scaling[active]
                convert = not torch.is_autocast_enabled()
                if convert:
                    expected = result.dtype
                    x = self._cast_input_dtype(x, lora_A.weight.dtype)
                output = lora_B(lora_A(dropout(x))) * scaling
                if convert:
                    output = output.to(expected)
                result = result + output
            return result

    return LoraLinear4bit


def prepare(model: torch.nn.Module, grad_ckpt: bool) -> torch.nn.Module:
    """PEFT's prepare_model_for_kbit_training as a QLoRA script calls it."""
    from peft import prepare_model_for_kbit_training

    return prepare_model_for_kbit_training(model, use_gradient_checkpointing=grad_ckpt)
