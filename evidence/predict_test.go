package evidence

import (
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/estimate"

	"github.com/canifinetune/canifinetune/catalog"
	"github.com/canifinetune/canifinetune/hfconfig"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// RequestFor is RequestForModel on the catalog's model: for every development
// case the two give the same request, assumptions and reason, so bench's
// estimate before a run (RequestForModel on a resolved model) is the one
// validate makes (RequestFor).
func TestRequestForModelMatchesRequestFor(t *testing.T) {
	cases := readDev(t)
	checked := 0
	for _, c := range cases {
		e, err := catalog.Lookup(c.Model)
		if err != nil {
			continue
		}
		m, err := hfconfig.Parse(e.Config)
		if err != nil {
			continue // RequestFor reports the parse error; nothing to share
		}
		m.Name = c.Model // modelsource names the model it resolves
		want, wantAssumed, wantWhy := RequestFor(c)
		got, gotAssumed, gotWhy := RequestForModel(m, c)
		if gotWhy != wantWhy {
			t.Errorf("%s: reason %q, want %q", c.ID, gotWhy, wantWhy)
		}
		if diff := cmp.Diff(wantAssumed, gotAssumed); diff != "" {
			t.Errorf("%s: assumed (-RequestFor +RequestForModel):\n%s", c.ID, diff)
		}
		if diff := cmp.Diff(want, got, cmpopts.IgnoreUnexported(hfconfig.Model{})); diff != "" {
			t.Errorf("%s: request (-RequestFor +RequestForModel):\n%s", c.ID, diff)
		}
		checked++
	}
	if checked < 100 {
		t.Errorf("only %d development cases are in the catalog", checked)
	}
}

// RequestForModel uses the model it is given, not the case's model name: a
// bench probe of a local directory names no catalog model.
func TestRequestForModelUsesTheGivenModel(t *testing.T) {
	c := readDev(t)[0]
	e, err := catalog.Lookup(c.Model)
	if err != nil {
		t.Fatal(err)
	}
	m, err := hfconfig.Parse(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	c.Model = "./somewhere/local"
	req, _, why := RequestForModel(m, c)
	if why != "" || req.Model != m {
		t.Errorf("RequestForModel on a local model: reason %q, model %p want %p", why, req.Model, m)
	}
	if _, _, why := RequestFor(c); why == "" {
		t.Error("RequestFor found a catalog model for a local path")
	}
}

// A catalog model whose config lacks vocab_size is refused with the field
// named; a case that states vocab_size is estimated with it.
func TestCaseVocabSize(t *testing.T) {
	seq, batch := 1024, 1
	c := Case{ID: "v", Model: "ibm/PowerLM-3b", Method: "full", Precision: "bf16-true", SeqLen: &seq, Batch: &batch,
		Framework: "hf-trainer", Measured: Measured{Kind: KindAllocated}}
	_, _, why := RequestFor(c)
	if !strings.Contains(why, "vocab_size") {
		t.Fatalf("without vocab_size: reason %q does not name the field", why)
	}
	v := 49152
	c.VocabSize = &v
	r, _, why := RequestFor(c)
	if why != "" || r.Model.Vocab != 49152 {
		t.Fatalf("with vocab_size: %q, vocab %v", why, r.Model)
	}
	zero := 0
	c.VocabSize = &zero
	g := 10.0
	c.Measured.GiB = &g
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "vocab_size") {
		t.Errorf("vocab_size 0: %v", err)
	}
}

// other_kernels: fused kernels, torch.compile, optimizer-in-backward and
// activation offload become request fields; an unknown name is refused by
// name, not ignored.
func TestOtherKernelsRead(t *testing.T) {
	var r estimate.Request
	if why := applyOtherKernels(&r, []string{"liger-rmsnorm", "foak", "torch.compile", "optimizer-in-backward", "activation-offload"}); why != "" {
		t.Fatal(why)
	}
	if diff := cmp.Diff([]estimate.Kernel{estimate.KernelLigerRMSNorm, estimate.KernelFOAK}, r.Kernels); diff != "" || !r.Compile || !r.OptimizerInBackward {
		t.Errorf("kernels %v compile %v in-bwd %v", r.Kernels, r.Compile, r.OptimizerInBackward)
	}
	if why := applyOtherKernels(&r, []string{"deepspeed-magic"}); !strings.Contains(why, "deepspeed-magic") {
		t.Errorf("unknown kernel: %q", why)
	}
}

// activation-offload is the offload checkpointing mode, whether the row
// names full checkpointing or none beside it.
func TestActivationOffloadCase(t *testing.T) {
	seq, batch := 4096, 2
	for _, ck := range []string{"full", "none"} {
		ck := ck
		c := Case{ID: "ao", Model: "meta-llama/Llama-3.2-3B-Instruct", Method: "full", Precision: "bf16-true", SeqLen: &seq, Batch: &batch,
			GradCkpt: &ck, OtherKernels: []string{"activation-offload"}, Framework: "torchtune", Measured: Measured{Kind: KindActive}}
		r, _, why := RequestFor(c)
		if why != "" || r.GradCkpt != estimate.CkptOffload {
			t.Errorf("grad_ckpt %s + activation-offload: %q, mode %s; want offload", ck, why, r.GradCkpt)
		}
	}
}

// A case's stated adapter dropout reaches the request: PEFT's dropout keeps
// a mask and its output per adapted module, so the same case estimates
// higher with dropout 0.05 than with 0, and a case that states none takes
// the framework's default (hf-trainer: 0).
func TestRequestForLoRADropout(t *testing.T) {
	c := Case{ID: "d", Model: "meta-llama/Llama-3.2-1B", Method: "lora", Precision: "bf16-true",
		LoRA: &LoRA{Rank: 16, Targets: []string{"all-linear"}}, Framework: "hf-trainer"}
	seq, batch := 1024, 2
	c.SeqLen, c.Batch = &seq, &batch
	def, _ := estimate.ByName("")
	alloc := func(d *float64) int64 {
		c.LoRA.Dropout = d
		r, _, why := RequestFor(c)
		if why != "" {
			t.Fatalf("unsupported: %s", why)
		}
		if d != nil && (r.LoRADropout == nil || *r.LoRADropout != *d) {
			t.Fatalf("request dropout %v, want %v", r.LoRADropout, d)
		}
		e, err := def.Estimate(r)
		if err != nil {
			t.Fatal(err)
		}
		return e.Levels.Allocated
	}
	zero, five := 0.0, 0.05
	none, off, on := alloc(nil), alloc(&zero), alloc(&five)
	if none != off {
		t.Errorf("no stated dropout: %d B, dropout 0: %d B; want equal (hf-trainer's default is 0)", none, off)
	}
	if on <= off {
		t.Errorf("dropout 0.05: %d B, not above dropout 0: %d B", on, off)
	}
}

// Optimizer names are read in the measuring framework's vocabulary.
func TestNormalizeOptimizer(t *testing.T) {
	for _, tt := range []struct {
		name, framework string
		want            estimate.Optimizer
	}{
		{"adamw_8bit", "torchtune", estimate.AOAdamW8bit},
		{"adamw_8bit", "hf-trainer", estimate.AdamW8bit},
		{"paged_adamw_8bit", "torchtune", estimate.PagedAdamW8bit},
		{"adamw_bnb_8bit", "torchtune", "adamw_bnb_8bit"},   // Normalize reads the alias as adamw_8bit
		{"AdamW_HF", "hf-trainer", estimate.AdamWTorchLoop}, // transformers' own AdamW: a per-parameter loop
		{"adam", "litgpt", estimate.AdamWTorch},
		{"adamw_torch_fused", "torchtune", estimate.AdamWTorchFused},
	} {
		if got := normalizeOptimizer(tt.name, tt.framework); got != tt.want {
			t.Errorf("normalizeOptimizer(%q, %q) = %q, want %q", tt.name, tt.framework, got, tt.want)
		}
	}
}
