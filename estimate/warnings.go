package estimate

import (
	"fmt"
	"math"

	"github.com/canifinetune/canifinetune/hfconfig"
	"github.com/canifinetune/canifinetune/internal/bytesize"
)

// warnings are what a normalized request asks for that runs, but not as the
// user probably expects: the estimate is still the memory of the request as
// given. Each says what to change.
func (r Request) warnings() []string {
	var w []string
	m := r.Model
	if m.MaxPositions > 0 && r.SeqLen > m.MaxPositions {
		w = append(w, fmt.Sprintf("a sequence of %d tokens is beyond the model's context of %d tokens (max_position_embeddings): positions past it were never trained; extend the context (RoPE scaling) or use a longer-context checkpoint — the memory is estimated for %d tokens as asked", r.SeqLen, m.MaxPositions, r.SeqLen))
	}
	if c := r.Card; c != nil && !c.BF16 && (r.Precision == BF16Mixed || r.Precision == BF16True) {
		w = append(w, fmt.Sprintf("%s has no native bf16: %s runs emulated and slowly, or is refused by the training stack; fp16-mixed (--precision fp16-mixed) is the usual choice on it", c.Name, r.Precision))
	}
	if r.Method != Full && r.LoRARank > m.NarrowestLinear() {
		if name, width := r.narrowestTarget(); width > 0 && r.LoRARank > width {
			w = append(w, fmt.Sprintf("LoRA rank %d is above the width of %s (min(in, out) = %d): its adapter holds more parameters than a full-rank update of it", r.LoRARank, name, width))
		}
	}
	if r.EagerLoss && (r.Stack != StackTorchtitan || !r.Compile) {
		w = append(w, "--eager-loss is read on the torchtitan stack with --compile only (torchtitan compiles its loss with its blocks since 2025-04); here the loss is estimated as "+stackLabel(r.Stack)+" runs it")
	}
	if r.FreesLogits && !r.Stack.Spec().OwnLoss {
		w = append(w, "--frees-logits is read with --stack pytorch only (a loop that computes its own loss); "+stackLabel(r.Stack)+" runs its own loss path")
	}
	if r.LongestFirst && r.Stack != StackLitGPT {
		w = append(w, "--longest-first is read on the litgpt stack only (lit-gpt's scripts put the longest sample first); on "+stackLabel(r.Stack)+" the estimate counts every micro-batch at --seq-len")
	}
	return w
}

// stackLabel names a request's stack for a message.
func stackLabel(s StackName) string {
	if s == "" {
		return "the default stack"
	}
	return "the " + string(s) + " stack"
}

// narrowestTarget is the targeted projection with the smallest min(in, out),
// routers aside.
func (r Request) narrowestTarget() (string, int64) {
	lins, err := r.Model.Targets(r.LoRATargets)
	if err != nil {
		return "", 0
	}
	name, width := "", int64(0)
	for _, l := range lins {
		if d := min(l.In, l.Out); l.Role != hfconfig.RoleRouter && (width == 0 || d < width) {
			name, width = l.Name, d
		}
	}
	return name, width
}

// maxEstimateBytes bounds every figure of an estimate: 64 PiB, above the full
// fine-tune of a 10^15-parameter model (16 bytes a parameter). A larger or a
// negative figure is an arithmetic failure, not a memory size.
const maxEstimateBytes = 1 << 56

// ErrNotComputable is wrapped when an estimate's figures came out negative or
// beyond any memory: the request passed validation but its arithmetic did not
// hold. Such an estimate is never returned, so it can never read "yes".
var ErrNotComputable = fmt.Errorf("%w: the estimate could not be computed", ErrInvalidRequest)

// finish is the last step of every estimator: it checks the figures and
// attaches the request's warnings.
func finish(e *Estimate, r Request) (*Estimate, error) {
	bad := func(what string, b int64) (*Estimate, error) {
		return nil, fmt.Errorf("%w: %s is %d bytes (want 0..%d); a dimension or a count of the request is out of range", ErrNotComputable, what, b, int64(maxEstimateBytes))
	}
	for _, c := range e.Components {
		if c.Bytes < 0 || c.Bytes > maxEstimateBytes {
			return bad(string(c.Name), c.Bytes)
		}
	}
	for _, f := range []struct {
		name string
		b    int64
	}{{"total", e.Total}, {"planning proxy", e.PlanningProxy}, {"allocated", e.Levels.Allocated},
		{"reserved", e.Levels.Reserved}, {"process", e.Levels.Process}, {"host offload", e.HostOffload}, {"paged optimizer", e.PagedOptimizer},
		{"trainable parameters", e.TrainableParams}} {
		if f.b < 0 || f.b > maxEstimateBytes {
			return bad(f.name, f.b)
		}
	}
	if r := e.Verdict.Ratio; math.IsNaN(r) || math.IsInf(r, 0) || r < 0 {
		return nil, fmt.Errorf("%w: verdict ratio %v", ErrNotComputable, r)
	}
	e.Warnings = r.warnings()
	if spill := e.PagedSpill(); spill > 0 {
		e.Warnings = append(e.Warnings, fmt.Sprintf("the paged optimizer's %.2f GiB of states in unified memory do not all fit on the card beside the run and its safety margin: the driver keeps about %.2f GiB of them in host RAM and pages them in and out every step, which fits but slows the step", bytesize.InGiB(e.PagedOptimizer), bytesize.InGiB(spill)))
	}
	return e, nil
}
