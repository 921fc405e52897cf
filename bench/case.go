package bench

import (
	"fmt"
	"strings"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/evidence"
)

// CaseKind is the measurement kind ToCase reports: max_memory_reserved, what
// the caching allocator held. It is the figure that decides whether a run
// fits (an allocation fails when reserved memory cannot grow), and the
// allocated and active figures go into the case's notes.
const CaseKind = evidence.KindReserved

// CaseFramework is the framework a bench case names. The probe is a plain
// PyTorch loop over a transformers model with PEFT adapters: torch.optim.AdamW
// (foreach), and for QLoRA peft's prepare_model_for_kbit_training, which
// upcasts embeddings and norms to fp32 — the defaults of the estimator's
// peft-accelerate stack, so validate reads a bench case with no assumed stack.
const CaseFramework = "peft-accelerate"

// ErrNotACase is returned by ToCase for a receipt that measured nothing a case
// can carry (a configuration, dependency or runtime error, or an interrupt).
var ErrNotACase = fmt.Errorf("receipt is not a measured case")

// ToCase converts a success or oom receipt to a measured case in the format of
// docs/measurements-schema.md, so bench receipts flow into validate and calibrate. An oom
// receipt becomes measured.oom=true with gib null: OOM has no exact peak.
func ToCase(r Receipt) (evidence.Case, error) {
	var c evidence.Case
	switch r.Status {
	case StatusSuccess:
		if r.Measured.PeakReservedBytes == nil || *r.Measured.PeakReservedBytes <= 0 {
			return c, fmt.Errorf("receipt %s: status success without measured.peak_reserved_bytes: %w", r.ID, ErrNotACase)
		}
	case StatusOOM:
	default:
		return c, fmt.Errorf("receipt %s: status %s: %w", r.ID, r.Status, ErrNotACase)
	}
	cfg := r.Config
	c = ConfigCase(cfg)
	c.ID = r.ID
	c.Source = fmt.Sprintf("canifinetune bench receipt %s (canifinetune %s)", r.ID, r.Tool.Version)
	c.Trust = "high" // the configuration is pinned exactly and the figure read from torch itself
	// What the probe found it ran overrides what it was asked to run.
	if e := r.Effective; e != nil {
		if e.ModelType != "" {
			c.Arch = ptr(e.ModelType)
		}
		if e.AttnImplementation != "" {
			c.Attn = ptr(e.AttnImplementation)
		}
		if l := c.LoRA; l != nil {
			if len(e.Targets) > 0 {
				l.Targets = e.Targets
			}
			if cfg.Alpha <= 0 && e.LoRAAlpha != nil {
				l.Alpha = ptr(*e.LoRAAlpha)
			}
		}
	}
	c.OptimizerStateDtype = stateDtype(r.Optimizer)
	if o := caseOptimizer(cfg.Optimizer, r.Optimizer); o != cfg.Optimizer {
		c.Optimizer = ptr(o)
	}
	if g := r.GPU; g != nil {
		if g.Name != "" {
			c.GPU.Name = ptr(g.Name)
		}
		c.GPU.VRAMGiB = gibOf(g.TotalBytes)
	}
	var notes []string
	if r.Status == StatusOOM {
		c.Measured.OOM = true
		c.Measured.Original = fmt.Sprintf("CUDA out of memory at stage %s after %d of %d updates", orUnknown(r.Stage), r.CompletedUpdates, cfg.Updates)
	} else {
		c.Measured.GiB = gibOf(r.Measured.PeakReservedBytes)
		c.Measured.Original = fmt.Sprintf("max_memory_reserved %d bytes", *r.Measured.PeakReservedBytes)
		if b := r.Measured.PeakAllocatedBytes; b != nil {
			notes = append(notes, fmt.Sprintf("max_memory_allocated %d bytes (%.4f GiB)", *b, GiB(*b)))
		}
		if b := r.Measured.PeakActiveBytes; b != nil {
			notes = append(notes, fmt.Sprintf("active_bytes.all.peak %d bytes (%.4f GiB)", *b, GiB(*b)))
		}
	}
	notes = append(notes, fmt.Sprintf("canifinetune bench probe, %d updates (bounded evidence): plain torch loop, no Trainer", cfg.Updates))
	if cfg.RandomInit {
		notes = append(notes, "random-init weights from config.json")
	}
	if r.Optimizer != nil && r.Optimizer.Class != "" {
		notes = append(notes, "optimizer class "+r.Optimizer.Class)
	}
	if r.Effective != nil && r.Effective.Autocast != nil {
		notes = append(notes, "autocast "+*r.Effective.Autocast)
	}
	var sw []string
	for _, k := range []string{"torch", "transformers", "peft", "bitsandbytes", "accelerate"} {
		if v, ok := r.Software[k]; ok {
			sw = append(sw, k+" "+v)
		}
	}
	if len(sw) > 0 {
		notes = append(notes, strings.Join(sw, ", "))
	}
	if r.GPU != nil && r.GPU.Driver != "" {
		notes = append(notes, "driver "+r.GPU.Driver)
	}
	c.Notes = strings.Join(notes, "; ")
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("receipt %s: %w", r.ID, err)
	}
	return c, nil
}

// ConfigCase is the case a probe configuration describes before it runs:
// the model, method, shapes, kernels and stack it asks for, measured by
// CaseKind, with nothing measured yet. ToCase adds what a receipt found; the
// estimate a receipt records before its run is evidence.RequestForModel on
// this case, so that it is the request validate makes for the finished case.
func ConfigCase(cfg ProbeConfig) evidence.Case {
	model := cfg.Model
	if cfg.ModelID != "" {
		model = cfg.ModelID
	}
	c := evidence.Case{
		Model:        model,
		Method:       cfg.Method,
		Precision:    cfg.Precision,
		SeqLen:       ptr(cfg.SeqLen),
		SeqLenKind:   "fixed", // synthetic tokens of exactly seq_len
		Batch:        ptr(cfg.Batch),
		GradAccum:    ptr(cfg.GradAccum),
		GradCkpt:     ptr("none"),
		Optimizer:    ptr(cfg.Optimizer),
		Attn:         ptr(cfg.Attn),
		FusedCE:      ptr("none"),
		OtherKernels: []string{},
		Framework:    CaseFramework,
		Sharding:     evidence.Sharding{Strategy: "none", CPUOffload: "none"},
		GPU:          evidence.GPU{Count: ptr(1)},
		Measured:     evidence.Measured{Kind: CaseKind},
	}
	if cfg.GradCkpt {
		c.GradCkpt = ptr("full")
	}
	if cfg.Quant != nil {
		c.Quant = &evidence.Quant{
			Scheme:       cfg.Quant.Scheme,
			DoubleQuant:  ptr(cfg.Quant.DoubleQuant),
			ComputeDtype: ptr("bf16"),
			StorageDtype: ptr("uint8"), // transformers' default bnb_4bit_quant_storage
		}
	}
	if cfg.Method == "lora" || cfg.Method == "qlora" {
		l := &evidence.LoRA{Rank: cfg.Rank, Targets: cfg.Targets, ExtraTrainable: []string{}}
		if cfg.Alpha > 0 {
			l.Alpha = ptr(cfg.Alpha)
		}
		c.LoRA = l
	}
	return c
}

// stateDtype is the case's optimizer_state_dtype: fp32 or bf16 when every
// state tensor has that dtype, null otherwise (8-bit optimizers keep uint8
// states with fp32 scales; the case format wants null for them).
func stateDtype(o *OptimizerRecord) *string {
	if o == nil || len(o.States) != 1 {
		return nil
	}
	switch o.States[0].Dtype {
	case "float32":
		return ptr("fp32")
	case "bfloat16":
		return ptr("bf16")
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// caseOptimizer is the optimizer name a receipt's run used: adamw_torch
// that torch stepped one parameter at a time is adamw_torch_forloop (a
// receipt without Impl comes from the probe that built it with
// fused=False, which turns foreach off), and one it fused is
// adamw_torch_fused.
func caseOptimizer(asked string, o *OptimizerRecord) string {
	if asked != "adamw_torch" || o == nil || o.Class != "torch.optim.adamw.AdamW" {
		return asked
	}
	switch o.Impl {
	case "", "for-loop":
		return string(estimate.AdamWTorchLoop)
	case "fused":
		return string(estimate.AdamWTorchFused)
	}
	return asked
}
