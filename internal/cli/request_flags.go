package cli

import "github.com/canifinetune/canifinetune/estimate"

// RequestFlags are the flags that describe the training run, shared by every
// command that takes one (estimate, bench), so that a run is spelled the same
// way everywhere. A command that cannot honour a value (bench's probe runs
// one stack) refuses it with a usage error naming the flag.
//
// The option flags' values, completions and help lines come from estimate's
// option tables (vocabularyVars); nil means not given, so that a --stack
// fills it.
type RequestFlags struct {
	Method       estimate.Method         `enum:"${method_enum}" default:"lora" help:"What is trained:${method_values}"`
	Precision    *estimate.Precision     `enum:"${precision_enum}" help:"How weights, gradients and optimizer states are held (default bf16-true, or the --stack's):${precision_values}"`
	Quant        *estimate.Quant         `enum:"${quant_enum}" help:"QLoRA base quantization (default nf4-dq):${quant_values}"`
	Rank         *int64                  `placeholder:"16" help:"LoRA rank, from 1 up to the widest targeted module (default 16)."`
	Targets      []string                `sep:"," help:"LoRA targets: 'attention' (default), 'all-linear', 'mlp', or module names as the model names them (q_proj,v_proj)."`
	Extra        []string                `name:"extra-trainable" sep:"," help:"Modules trained in full besides adapters (lm_head, embed_tokens)."`
	SeqLen       int64                   `name:"seq-len" default:"2048" help:"Tokens per sequence (padded or packed length)."`
	TargetLen    int64                   `name:"target-len" placeholder:"TOKENS" help:"Target (decoder) tokens per sequence of an encoder-decoder model (T5, mT5, BART), whose --seq-len is then the source length. Default: as long as --seq-len."`
	Batch        int64                   `default:"1" help:"Micro-batch size per GPU."`
	GradAccum    int64                   `name:"grad-accum" default:"1" help:"Micro-batches per optimizer update. Above 1 the gradients stay resident through the next forward, and FSDP's no_sync keeps them unsharded."`
	Dynamic      bool                    `name:"dynamic-padding" help:"Batches are padded to their own longest sample (--seq-len is the longest): shapes change between steps and the caching allocator reserves more."`
	LongestFirst bool                    `name:"longest-first" help:"The first micro-batch holds the longest sample and later ones are shorter (lit-gpt's 2023 finetune scripts put it first): the peak is the first micro-batch's, with nothing of an earlier one alive (read on the litgpt stack)."`
	SeqLenP50    int64                   `name:"seq-len-p50" placeholder:"TOKENS" help:"Median sample length when --seq-len is only the maximum (implies --dynamic-padding): the reserved level follows the batch shapes of a length distribution with this median."`
	SeqLenFile   string                  `name:"seq-len-file" type:"path" placeholder:"FILE" help:"File of precomputed sample token lengths, one a line, or a histogram of 'LENGTH COUNT' lines (implies --dynamic-padding; --seq-len stays the maximum, longer samples count as truncated to it)."`
	SeqLenData   *string                 `name:"seq-len-dataset" enum:"${seq_len_dataset_enum}" placeholder:"NAME" help:"A public dataset whose measured length histogram the binary keeps, as --seq-len-file would read it (implies --dynamic-padding). Counted with one tokenizer: a tokenizer with a larger vocabulary counts fewer tokens for the same text, so for it the lengths err long and the estimate errs high:${seq_len_dataset_values}"`
	Dropout      *float64                `name:"lora-dropout" help:"LoRA dropout probability; above 0 each adapter keeps its dropped-out input and mask for the backward. Default: the stack's (0 for plain PEFT)."`
	GradCkpt     *estimate.Checkpointing `name:"grad-ckpt" enum:"${grad_ckpt_enum}" help:"Activation checkpointing (default none, or the --stack's):${grad_ckpt_values}"`
	Optimizer    *estimate.Optimizer     `enum:"${optimizer_enum}" help:"Optimizer (default adamw_torch, or the --stack's):${optimizer_values}"`
	OptimDtype   *estimate.Dtype         `name:"optimizer-state-dtype" placeholder:"DTYPE" enum:"${optimizer_state_dtype_enum}" help:"Dtype of the optimizer states (default: the parameters'):${optimizer_state_dtype_values}"`
	Attn         *estimate.Attention     `enum:"${attn_enum}" help:"Attention implementation (default sdpa, or the --stack's):${attn_values}"`
	FusedCE      *estimate.LossKernel    `name:"fused-ce" enum:"${fused_ce_enum}" help:"Loss kernel (default none, or the --stack's):${fused_ce_values}"`
	Task         *estimate.Task          `enum:"${task_enum}" help:"The head the loss goes through (default causal-lm; sequence-classification for encoder-only models, seq2seq-lm for encoder-decoder ones):${task_values}"`
	Kernels      []estimate.Kernel       `sep:"," enum:"${kernels_enum}" help:"Fused kernels besides the loss kernel, comma-separated:${kernels_values}"`
	Compile      bool                    `help:"The run uses torch.compile: the norms' fp32 upcast and the gated activation's output are recomputed in the backward, not saved."`
	EagerLoss    bool                    `name:"eager-loss" help:"With --compile on the torchtitan stack: the loss function runs eager (torchtitan compiled only its blocks from 2024-12-18 to 2025-04-02; since then it compiles the loss too, which keeps 2 B per logit instead of 12)."`
	FreesLogits  bool                    `name:"frees-logits" help:"With --stack pytorch: the loop frees the model's output before loss.backward() (a loss function that returns only the loss, or del logits), so the logits are not held through the backward."`
	OptInBwd     bool                    `name:"optimizer-in-backward" help:"Each gradient is stepped and freed as the backward produces it (torchtune's optimizer_in_bwd; full fine-tuning, no accumulation)."`
	Stack        *estimate.StackName     `enum:"${stack_enum}" help:"Framework preset that fills what the flags leave unset (precision, optimizer, attention, adapter and frozen dtypes, fp32 upcast under QLoRA, the loss path):${stack_values}"`
}

// canonicalize replaces the aliases kong accepted (every spelling of
// ${NAME_enum}) by the names they stand for, so that what a command reads
// from the flags, passes to the bench probe or prints is the option's own
// name. Kong has checked each value, so a parse cannot fail here.
func (f *RequestFlags) canonicalize() {
	canon(&f.Method, estimate.ParseMethod)
	canonPtr(f.Precision, estimate.ParsePrecision)
	canonPtr(f.Quant, estimate.ParseQuant)
	canonPtr(f.GradCkpt, estimate.ParseCheckpointing)
	canonPtr(f.Optimizer, estimate.ParseOptimizer)
	canonPtr(f.OptimDtype, estimate.ParseStateDtype)
	canonPtr(f.Attn, estimate.ParseAttention)
	canonPtr(f.FusedCE, estimate.ParseLossKernel)
	canonPtr(f.Stack, estimate.ParseStack)
	canonPtr(f.Task, estimate.ParseTask)
	for i := range f.Kernels {
		canon(&f.Kernels[i], estimate.ParseKernel)
	}
}

func canon[T ~string](p *T, parse func(string) (T, error)) {
	if v, err := parse(string(*p)); err == nil {
		*p = v
	}
}

func canonPtr[T ~string](p *T, parse func(string) (T, error)) {
	if p != nil {
		canon(p, parse)
	}
}
