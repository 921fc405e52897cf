package estimate

import (
	"fmt"
	"sort"
)

// ComponentID names a term of the footprint. An estimate holds each at most
// once, so an Explanation keys its sources by it.
type ComponentID string

// Component IDs, stable in JSON output.
const (
	CWeights       ComponentID = "weights"
	CQuantOverhead ComponentID = "quant_overhead"
	CAdapters      ComponentID = "lora_adapters"
	CGradients     ComponentID = "gradients"
	COptimizer     ComponentID = "optimizer_states"
	CActivations   ComponentID = "activations"
	CLogits        ComponentID = "logits_chain"
	COverhead      ComponentID = "cuda_overhead"
	CSafety        ComponentID = "safety_margin"
)

// Component is one term of the footprint: its bytes, per GPU when the
// estimate is. Where its formula comes from is in the Explanation.
type Component struct {
	Name  ComponentID
	Bytes int64
}

// Phases are a step's transient peaks: the forward/loss phase (saved
// activations and the loss chain) and the backward-end/optimizer-step phase
// (gradients and optimizer temporaries).
type Phases struct {
	Forward int64
	Step    int64
	// ForwardPeak is true when the forward/loss phase is the larger (ties
	// included): the components then hold its parts.
	ForwardPeak bool
}

// Levels are the peaks each kind of measurement should show (docs/measurements-schema.md):
// tensors (max_memory_allocated), what the caching allocator holds
// (max_memory_reserved), and what the device shows (nvidia-smi, with the CUDA
// context). Active is reported as Allocated: every estimator here models
// live tensors, and active ≥ allocated only by freed-but-unreleased blocks.
type Levels struct {
	Allocated int64
	Reserved  int64
	Process   int64
}

// Level returns the predicted peak for a measurement kind.
func (l Levels) Level(kind string) (int64, error) {
	switch kind {
	case "allocated", "active":
		return l.Allocated, nil
	case "reserved":
		return l.Reserved, nil
	case "process":
		return l.Process, nil
	}
	return 0, fmt.Errorf("unknown measurement kind %q", kind)
}

// Fit is a feasibility verdict.
type Fit string

// Verdicts (seed 000): yes ≤ 0.85 < marginal ≤ 0.97 < no. Unknown when no
// GPU budget was given.
const (
	FitYes      Fit = "yes"
	FitMarginal Fit = "marginal"
	FitNo       Fit = "no"
	FitUnknown  Fit = "unknown"
)

// Verdict thresholds of seed 000: heuristic planning thresholds, not
// calibrated OOM probabilities.
const (
	YesRatio      = 0.85
	MarginalRatio = 0.97
)

// Verdict compares the planning total with the budget.
type Verdict struct {
	Fit    Fit
	Ratio  float64 // total / budget; 0 when unknown
	Budget int64   // bytes the run may use
	// BudgetSource says what the budget is: "free memory" or "total memory".
	BudgetSource string
}

// Classify applies the seed 000 thresholds.
func Classify(total, budget int64) Verdict {
	if budget <= 0 {
		return Verdict{Fit: FitUnknown}
	}
	ratio := float64(total) / float64(budget)
	v := Verdict{Ratio: ratio, Budget: budget}
	switch {
	case ratio <= YesRatio:
		v.Fit = FitYes
	case ratio <= MarginalRatio:
		v.Fit = FitMarginal
	default:
		v.Fit = FitNo
	}
	return v
}

// Grade is a qualitative evidence grade, never a probability.
type Grade string

// Grades.
const (
	High   Grade = "high"
	Medium Grade = "medium"
	Low    Grade = "low"
)

// Confidence is a grade with the reason for it.
type Confidence struct {
	Grade  Grade
	Reason string
}

// Estimate is an estimator's answer for one request: numbers only. What
// they rest on (sources, assumptions, confidence) is the Explanation, a
// separate step that searches over many requests skip.
type Estimate struct {
	Estimator string
	Version   string

	Components []Component
	// Total is the planning total: every component, safety margin included once.
	Total int64
	// PlanningProxy is Total − safety margin: what a measured reserved peak is
	// compared with (seed 000).
	PlanningProxy int64
	Levels        Levels
	Verdict       Verdict

	Params          int64
	TrainableParams int64

	// PerGPU is true when components are per GPU of a sharded run.
	PerGPU bool
	// HostOffload is host RAM that CPU offload needs, per GPU process.
	HostOffload int64
	// PagedOptimizer is a paged optimizer's states in CUDA unified memory,
	// per GPU: outside the caching allocator, so in neither the allocated
	// nor the reserved level, and not in Total — the driver evicts them to
	// host RAM rather than fail the run — but resident on the card beside
	// the run when there is room, so in the process level.
	PagedOptimizer int64
	// Warnings are what the request asks for that runs, but probably not as
	// meant (a sequence beyond the model's context, bf16 on a card without
	// it): the figures are for the request as given.
	Warnings []string
	// Phases are the transient bytes of the step's two phases on top of the
	// resident state, per GPU: the larger is in Components (estimators that
	// sum every term leave them zero).
	Phases Phases

	// buf backs Components so an estimate allocates once. An Estimate is
	// used through its pointer; a copy would share the backing array.
	buf [10]Component
}

// Component returns the bytes of a component (0 and false when absent).
func (e *Estimate) Component(name ComponentID) (int64, bool) {
	for _, c := range e.Components {
		if c.Name == name {
			return c.Bytes, true
		}
	}
	return 0, false
}

// setComponent sets the bytes of a component already in the estimate.
func (e *Estimate) setComponent(name ComponentID, b int64) {
	for i := range e.Components {
		if e.Components[i].Name == name {
			e.Components[i].Bytes = b
			return
		}
	}
}

// addTo adds bytes to a component already in the estimate.
func (e *Estimate) addTo(name ComponentID, b int64) {
	if c, ok := e.Component(name); ok {
		e.setComponent(name, c+b)
	}
}

// componentSum is the sum of the components so far.
func (e *Estimate) componentSum() int64 {
	var n int64
	for _, c := range e.Components {
		n += c.Bytes
	}
	return n
}

// Largest returns component names ordered by size, largest first.
func (e *Estimate) Largest() []Component {
	cs := append([]Component(nil), e.Components...)
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].Bytes > cs[j].Bytes })
	return cs
}

// Explanation is what an estimate rests on, for a reader: where each
// component's formula comes from, what the estimate assumes, and how well
// measurements cover the request.
type Explanation struct {
	// Sources holds one line per component of the estimate.
	Sources     map[ComponentID]string
	Assumptions []string
	Confidence  Confidence
}

// Source returns where a component's formula comes from ("" when the
// explanation has none for it).
func (x Explanation) Source(id ComponentID) string { return x.Sources[id] }

// Estimator is a named memory model.
type Estimator interface {
	Name() string
	Version() string
	// Describe is one line on what the estimator is, for --help and reports.
	Describe() string
	// Estimate computes the numbers of a request.
	Estimate(Request) (*Estimate, error)
	// Explain says what e, this estimator's estimate of the request, rests
	// on. It fails only where Estimate would have (an invalid request).
	Explain(Request, *Estimate) (Explanation, error)
}

// registry holds the estimators by name; Default names the default.
var registry = map[string]Estimator{}

// Default is the name of the default estimator.
const Default = "canifinetune"

func register(e Estimator) { registry[e.Name()] = e }

// aliases are other names an estimator answers to: "reference" says what
// seed000 is (the reference model of docs/memory-model.md), while the
// name seed000 stays accepted and is what outputs report.
var aliases = map[string]string{"reference": "seed000"}

// ByName returns a registered estimator, by name or alias.
func ByName(name string) (Estimator, error) {
	if name == "" || name == "default" {
		name = Default
	}
	if n, ok := aliases[name]; ok {
		name = n
	}
	if e, ok := registry[name]; ok {
		return e, nil
	}
	return nil, fmt.Errorf("unknown estimator %q (have %v)", name, Names())
}

// Names lists the registered estimators, sorted.
func Names() []string {
	var ns []string
	for n := range registry {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

// PagedSpill is how much of a paged optimizer's unified-memory states do
// not fit on the card beside the run and its safety margin (the budget the
// verdict used), which the driver keeps in host RAM and pages in and out
// every step; 0 when they all fit, or without a budget.
func (e *Estimate) PagedSpill() int64 {
	b := e.Verdict.Budget
	if e.PagedOptimizer <= 0 || b <= 0 {
		return 0
	}
	return max(0, min(e.PagedOptimizer, e.Total+e.PagedOptimizer-b))
}
