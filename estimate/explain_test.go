package estimate

import (
	"strings"
	"testing"
)

// shardingNote is written apart from applySharding: every component whose
// bytes sharding changed says so in its source, and no other does.
func TestShardingNoteFollowsTheNumbers(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-7B")
	offloads := map[string][]string{
		"ddp": {"none"}, "fsdp_no_shard": {"none", "params+optimizer"},
		"zero1": {"none", "optimizer"}, "zero2": {"none", "optimizer"},
		"zero3": {"none", "optimizer", "params", "params+optimizer"}, "fsdp_full_shard": {"none", "params+optimizer"},
		"fsdp_shard_grad_op": {"none", "params+optimizer"}, "fsdp_hybrid_shard": {"none", "params"},
	}
	bases := map[string]Request{
		"full mixed": {Model: m, Method: Full, Precision: BF16Mixed, SeqLen: 1024, Batch: 1, GPUTotal: 80 * GiB},
		"lora":       {Model: m, Method: LoRA, SeqLen: 1024, Batch: 1, GPUTotal: 80 * GiB},
		"qlora":      {Model: m, Method: QLoRA, SeqLen: 1024, Batch: 1, GPUTotal: 80 * GiB},
	}
	ref := Reference{}
	checked := 0
	for what, base := range bases {
		one, err := ref.Estimate(base)
		if err != nil {
			t.Fatal(err)
		}
		x1, err := ref.Explain(base, one)
		if err != nil {
			t.Fatal(err)
		}
		for st, offs := range offloads {
			for _, off := range offs {
				r := base
				r.Sharding = Sharding{Strategy: Strategy(st), GPUs: 4, CPUOffload: Offload(off)}
				e, err := ref.Estimate(r)
				if err != nil {
					t.Fatalf("%s, %s, offload %s: %v", what, st, off, err)
				}
				x, err := ref.Explain(r, e)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range e.Components {
					before, _ := one.Component(c.Name)
					changed := c.Bytes != before
					noted := x.Source(c.Name) != x1.Source(c.Name)
					if changed != noted {
						t.Errorf("%s, %s, offload %s: %s %d → %d bytes, source %q", what, st, off, c.Name, before, c.Bytes, x.Source(c.Name))
					}
					checked++
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no component checked")
	}
}

// Explain reads the phase the estimate found to be the peak: the sources of
// activations and gradients follow Phases.ForwardPeak.
func TestExplainNamesThePeakPhase(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-7B")
	est := PhasePeak{Coef: DefaultCoefficients}
	for _, tt := range []struct {
		name    string
		req     Request
		forward bool
	}{
		{"long sequences: the forward/loss phase", Request{Model: m, Method: LoRA, SeqLen: 4096, Batch: 4}, true},
		{"full fine-tune, short sequences: the optimizer step", Request{Model: m, Method: Full, Precision: BF16Mixed, SeqLen: 64, Batch: 1, GradCkpt: "full"}, false},
	} {
		e, err := est.Estimate(tt.req)
		if err != nil {
			t.Fatal(err)
		}
		if e.Phases.ForwardPeak != tt.forward {
			t.Fatalf("%s: ForwardPeak = %v (forward %d, step %d)", tt.name, e.Phases.ForwardPeak, e.Phases.Forward, e.Phases.Step)
		}
		x, err := est.Explain(tt.req, e)
		if err != nil {
			t.Fatal(err)
		}
		acts := x.Source(CActivations)
		if got := strings.HasPrefix(acts, "forward/loss phase"); got != tt.forward {
			t.Errorf("%s: activations source %q", tt.name, acts)
		}
	}
}

// A checkpointed full fine-tune under autocast on the transformers path
// puts the output layer's weight cast (or autocast's whole cache at the
// forward's end) in the logits component: its source says so, and a
// request whose logits component is the loss chain alone does not.
func TestAutocastCastInLogitsSource(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-0.5B")
	pp := PhasePeak{Coef: DefaultCoefficients}
	named := 0
	for _, ck := range []Checkpointing{CkptFull, CkptNone} {
		r := Request{Model: m, Method: Full, Precision: BF16Mixed, GradCkpt: ck, SeqLen: 2048, Batch: 8}
		e, err := pp.Estimate(r)
		if err != nil {
			t.Fatal(err)
		}
		if !e.Phases.ForwardPeak {
			t.Fatalf("ckpt %s: the optimizer step is the peak; the logits component is not shown", ck)
		}
		x, err := pp.Explain(r, e)
		if err != nil {
			t.Fatal(err)
		}
		tt, _, err := pp.terms(r)
		if err != nil {
			t.Fatal(err)
		}
		logits, _ := e.Component(CLogits)
		chain := int64(hfLogitBytes * tt.LogitUnit)
		src := x.Source(CLogits)
		cast := strings.Contains(src, "weight cast")
		if logits == 0 {
			t.Fatalf("ckpt %s: no logits component", ck)
		}
		if (logits != chain) != cast {
			t.Errorf("ckpt %s: logits %d B, the loss chain alone %d B; source %q", ck, logits, chain, src)
		}
		if cast {
			named++
		}
	}
	if named != 1 {
		t.Errorf("the weight cast named in %d of 2 sources, want the checkpointed one", named)
	}
}
