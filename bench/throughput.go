package bench

import (
	"fmt"

	"github.com/canifinetune/canifinetune/evidence"
)

// ToThroughput converts a success receipt into a measured speed case
// (docs/throughput-schema.md) for validate --throughput: the configuration
// the probe ran (ToCase's) and the tokens per second of its timed updates.
// A receipt without a timed update, or that did not succeed, is no speed
// case (ErrNotACase).
func ToThroughput(r Receipt) (evidence.ThroughputCase, error) {
	var t evidence.ThroughputCase
	if r.Status != StatusSuccess {
		return t, fmt.Errorf("receipt %s: status %s: %w", r.ID, r.Status, ErrNotACase)
	}
	if r.Timing == nil || r.Timing.TokensPerS == nil || *r.Timing.TokensPerS <= 0 {
		return t, fmt.Errorf("receipt %s: no timed update (timing.tokens_per_s): %w", r.ID, ErrNotACase)
	}
	c, err := ToCase(r)
	if err != nil {
		return t, err
	}
	timing := fmt.Sprintf("the one update, timed (timing.mean_step_s %s)", orNA(r.Timing.MeanStepS))
	if r.CompletedUpdates > 1 {
		// The first update is left out of the timing.
		timing = fmt.Sprintf("mean of %d timed updates after a warm-up one (timing.mean_step_s %s)", r.CompletedUpdates-1, orNA(r.Timing.MeanStepS))
	}
	t = evidence.ThroughputCase{
		ID: c.ID,
		// One source for a machine's probes, so validate --throughput groups
		// them; the receipt's id is the case's.
		Source: "canifinetune bench probes on " + orUnknown(derefOr(c.GPU.Name)),
		// The configuration is pinned exactly, but the speed is the mean of
		// a few updates of a plain loop on synthetic tokens.
		Trust: "medium",
		Model: c.Model, Method: c.Method, Precision: c.Precision, Quant: c.Quant,
		SeqLen: c.SeqLen, SeqLenKind: c.SeqLenKind, Batch: c.Batch, GradAccum: c.GradAccum,
		GradCkpt: c.GradCkpt, Optimizer: c.Optimizer, Attn: c.Attn, OtherKernels: []string{},
		Framework: c.Framework,
		GPU:       evidence.ThroughputGPU{Name: c.GPU.Name, Count: ptr(1), Nodes: ptr(1), VRAMGiB: c.GPU.VRAMGiB},
		Sharding:  c.Sharding,
		Measured: evidence.ThroughputMeasured{
			TokensPerSec: ptr(*r.Timing.TokensPerS),
			Original:     fmt.Sprintf("timing.tokens_per_s %.6g", *r.Timing.TokensPerS),
		},
		Notes: fmt.Sprintf("%s; canifinetune %s; %s", timing, r.Tool.Version, c.Notes),
	}
	if l := c.LoRA; l != nil {
		t.LoRA = &evidence.ThroughputLoRA{Rank: ptr(l.Rank), Targets: l.Targets}
	}
	return t, nil
}

func derefOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func orNA(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.4g s", *v)
}
