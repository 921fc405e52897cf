package report

import (
	"errors"
	"fmt"
	"strings"

	"github.com/canifinetune/canifinetune/estimate"
)

// requestFlags names each field of an estimate.FieldError by the estimate
// flag that sets it (the web page's query parameter is the flag without its
// dashes), with what to try instead.
var requestFlags = map[string]struct{ flag, hint string }{
	"lora_rank":          {"--rank", "--rank 16"},
	"lora_dropout":       {"--lora-dropout", "--lora-dropout 0.05  (LoRA only)"},
	"lora_targets":       {"--targets", "--method lora --targets all-linear, or --method full without --targets"},
	"extra_trainable":    {"--extra-trainable", "--extra-trainable lm_head,embed_tokens  (LoRA only)"},
	"seq_len":            {"--seq-len", "--seq-len 2048"},
	"batch":              {"--batch", "--batch 1"},
	"seq_len × batch":    {"--seq-len × --batch", "--seq-len 2048 --batch 1"},
	"grad_accum":         {"--grad-accum", "--grad-accum 1"},
	"target_len":         {"--target-len", "drop --target-len (it is for encoder-decoder models: T5, mT5, BART)"},
	"target_len × batch": {"--target-len × --batch", "--target-len 512 --batch 1"},
	"task":               {"--task", "canifinetune estimate --help  (the --task values say which models have each head)"},
	"kernels":            {"--kernels", "drop --kernels"},
	"fused_ce":           {"--fused-ce", "--fused-ce none"},
	"method":             {"--method", "--method lora"},
	"num_gpus":           {"the number of GPUs", "--num-gpus 8"},
	"gpu_vram_gb":        {"--gpu-vram-gb", "--gpu-vram-gb 24"},
	"available_vram_gb":  {"--available-vram-gb", "--gpu rtx-4090 --available-vram-gb 21.5"},
	"cpu_offload":        {"--offload", "--strategy zero2 --offload optimizer, or --strategy zero3 --offload params+optimizer"},
	"attn":               {"--attn", "--attn sdpa"},
	"grad_ckpt":          {"--grad-ckpt", "--grad-ckpt full"},
	"strategy":           {"--strategy", "canifinetune estimate --help  (the --strategy values)"},
	"optimizer":          {"--optimizer", "canifinetune estimate --help  (the --optimizer values)"},
	"model":              {"the model", "another --stack, or a model the stack implements"},
}

// RequestProblem is an invalid request in the words of the command line.
type RequestProblem struct {
	// Flag is the flag that sets the field ("--seq-len"), or the field's
	// own name when no single flag does.
	Flag string
	// Message is the sentence the CLI prints: "--seq-len must be an integer
	// in 1..16777216, got -5".
	Message string
	// Hint is what to try instead.
	Hint string
}

// Param is the web query parameter of the flag: the flag without its
// leading dashes, and for a product of two flags the first ("seq-len").
func (p RequestProblem) Param() string {
	f, _, _ := strings.Cut(p.Flag, " ")
	return strings.TrimPrefix(f, "--")
}

// DescribeRequestError words an invalid request (from estimate.Request's
// Normalize, or a *estimate.FieldError built by the caller) by the flag
// that sets the field.
func DescribeRequestError(err error) RequestProblem {
	var fe *estimate.FieldError
	if !errors.As(err, &fe) {
		return RequestProblem{Message: err.Error(), Hint: "canifinetune estimate --help"}
	}
	f, ok := requestFlags[fe.Field]
	if !ok {
		f.flag, f.hint = fe.Field, "canifinetune estimate --help"
	}
	switch {
	case strings.HasPrefix(fe.Want, "unset under method full"):
		f.hint = fmt.Sprintf("drop %s, or --method lora", f.flag)
	case fe.Field == "cpu_offload" && strings.HasPrefix(fe.Want, string(estimate.OffloadParamsOptimizer)+" or"):
		f.hint = "--offload " + string(estimate.OffloadParamsOptimizer)
	case fe.Field == "method" && strings.Contains(fe.Want, "under --stack"):
		f.hint = "--method full, or another --stack"
	}
	return RequestProblem{Flag: f.flag, Message: fmt.Sprintf("%s must be %s, got %s", f.flag, fe.Want, fe.Value), Hint: f.hint}
}
