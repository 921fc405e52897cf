package evidence

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/internal/bytesize"
)

// Calibration is the default estimator's coefficients fitted on a cohort,
// with the rows used, their residuals, and the domain the fit is valid in.
type Calibration struct {
	SchemaVersion    int                   `json:"schema_version"`
	Estimator        string                `json:"estimator"`
	EstimatorVersion string                `json:"estimator_version"`
	Cohort           string                `json:"cohort"`
	Method           string                `json:"method"`
	Coefficients     estimate.Coefficients `json:"coefficients"`
	Rows             []string              `json:"rows"`
	Residuals        []Residual            `json:"residuals"`
	Summary          Summary               `json:"fit_summary"`
	Domain           Domain                `json:"domain"`
}

// Residual is one fitted row.
type Residual struct {
	ID          string  `json:"id"`
	Kind        string  `json:"kind"`
	MeasuredGiB float64 `json:"measured_gib"`
	FittedGiB   float64 `json:"fitted_gib"`
	ErrorPct    float64 `json:"error_pct"`
	// Weight is the final robust (Huber) weight: below 1 for rows the fit
	// treats as outliers.
	Weight float64 `json:"weight"`
}

// Domain is where a calibration may be applied: the model types, methods and
// stacks it saw, and the range of GPU memory of its rows.
type Domain struct {
	ModelTypes []string   `json:"model_types"`
	Methods    []string   `json:"methods"`
	Stacks     []string   `json:"stacks"`
	GPUMemGiB  [2]float64 `json:"gpu_memory_gib"`
}

// Contains reports whether a request lies in the domain, and if not, why.
func (d Domain) Contains(r estimate.Request) (bool, string) {
	if r.Model != nil && !slices.Contains(d.ModelTypes, r.Model.ModelType) {
		return false, fmt.Sprintf("model type %s is not among the fitted %v", r.Model.ModelType, d.ModelTypes)
	}
	m := string(r.Method)
	if m == "" {
		m = string(estimate.LoRA)
	}
	if !slices.Contains(d.Methods, m) {
		return false, fmt.Sprintf("method %s is not among the fitted %v", m, d.Methods)
	}
	if r.Stack != "" && !slices.Contains(d.Stacks, string(r.Stack)) {
		return false, fmt.Sprintf("stack %s is not among the fitted %v", r.Stack, d.Stacks)
	}
	if r.GPUTotal > 0 {
		g := bytesize.InGiB(r.GPUTotal)
		if g < d.GPUMemGiB[0]*0.95 || g > d.GPUMemGiB[1]*1.05 {
			return false, fmt.Sprintf("GPU memory %.0f GiB is outside the fitted %.0f–%.0f GiB", g, d.GPUMemGiB[0], d.GPUMemGiB[1])
		}
	}
	return true, ""
}

// FitStart is where the fit starts: seed 000's values (activation shape ×1,
// a bf16 block input per checkpointed layer), a small
// allocator overhead, and the CUDA context the transformers performance
// guide measured (1343 MiB, shared/measurements hf-perf rows), which the fit
// keeps fixed because the cohort has no decoder row read with nvidia-smi.
// logits_bytes is fixed too, at what the fake-tensor oracle shows the stock
// loss holding when its backward starts (12 B per logit: the fp32
// log-softmax, the fp32 NLL gradient and the fp32 log-softmax gradient;
// docs/memory-model.md#logits-and-loss-chain); it is not fitted.
var FitStart = estimate.Coefficients{
	ActGated: 1, ActClassic: 1, FullScale: 1, Logits: 12, CkptPerLayer: 4,
	ReservedFrac: 0.05, ReservedLargest: 0.5, ReservedDynamic: 0.5, ReservedConstGiB: 0.3, ContextGiB: 1343.0 / 1024,
}

// FitFloors: the fit keeps each coefficient at or above a physical floor,
// so collinear terms cannot trade places: activations at least half seed
// 000's shape; full fine-tuning saves at least what adapter training saves
// (a trained Linear keeps its input, a frozen one need not); an unchunked
// loss chain holds, when its backward starts, at least the fp32 log-softmax
// output, the fp32 NLL gradient and the fp32 log-softmax gradient (12 B per
// logit: stock transformers and torchtune upcast the logits before the
// loss), a chunked one at least the bf16 logits (2 B); a
// checkpointed block keeps at least its bf16 input (2 B per token per hidden
// unit); allocator terms are non-negative.
//
// huberK is the relative error (10 %) beyond which a row's weight falls as
// 1/|error|: a few rows whose configuration the source leaves loose cannot
// pull the coefficients on their own.
const huberK = 0.10

// ErrNothingToFit is returned when no case can be used.
var ErrNothingToFit = errors.New("no usable cases to fit")

type fitRow struct {
	c   Case
	req estimate.Request
	y   float64 // measured bytes
}

// coefficient accessors in fit order.
var fitParams = []struct {
	name  string
	get   func(*estimate.Coefficients) *float64
	scale float64 // step for numeric derivatives (the model is piecewise linear)
	// lower is the physical floor of the coefficient (see FitFloors).
	lower float64
	what  string
}{
	{"act_gated", func(k *estimate.Coefficients) *float64 { return &k.ActGated }, 0.01, 0.5, "× the per-layer activation shape (docs/memory-model.md#activations), gated MLPs"},
	{"act_classic", func(k *estimate.Coefficients) *float64 { return &k.ActClassic }, 0.01, 0.5, "× the per-layer activation shape (docs/memory-model.md#activations), two-matmul MLPs"},
	{"act_full_scale", func(k *estimate.Coefficients) *float64 { return &k.FullScale }, 0.01, 1, "× activations for full fine-tuning"},
	{"ckpt_bytes_per_token_hidden", func(k *estimate.Coefficients) *float64 { return &k.CkptPerLayer }, 0.05, 2, "bytes per token per hidden unit per checkpointed block"},
	{"reserved_frac", func(k *estimate.Coefficients) *float64 { return &k.ReservedFrac }, 0.001, 0, "reserved = allocated·(1+frac) + …"},
	{"reserved_largest", func(k *estimate.Coefficients) *float64 { return &k.ReservedLargest }, 0.01, 0, "… + this × the largest transient tensor (fixed shapes) …"},
	{"reserved_dynamic", func(k *estimate.Coefficients) *float64 { return &k.ReservedDynamic }, 0.01, 0, "… or, with batches padded to their longest sample, this × the step's shape-dependent transient …"},
	{"reserved_const_gib", func(k *estimate.Coefficients) *float64 { return &k.ReservedConstGiB }, 0.01, 0, "… + this many GiB"},
}

// CoefficientRow is one named coefficient of a calibration with what it scales.
type CoefficientRow struct {
	Name   string
	Value  float64
	What   string
	Fitted bool // false: fixed, not fitted (logits_bytes, context_gib)
}

// CoefficientRows lists k's coefficients in fit order, then the fixed ones.
func CoefficientRows(k estimate.Coefficients) []CoefficientRow {
	rows := make([]CoefficientRow, 0, len(fitParams)+2)
	for _, fp := range fitParams {
		rows = append(rows, CoefficientRow{fp.name, *fp.get(&k), fp.what, true})
	}
	return append(rows,
		CoefficientRow{"logits_bytes", k.Logits, "bytes per logit, stock loss (fixed: the oracle's fp32 log-softmax and two fp32 gradients)", false},
		CoefficientRow{"context_gib", k.ContextGiB, "CUDA context beyond reserved (fixed)", false})
}

// fitKind: a case Fit can use by its trust and measurement: measured (not
// simulated), high or medium trust, with an exact peak below the process
// level (context_gib is fixed, not fitted).
func fitKind(c Case) bool {
	return trusted(c) && !c.Measured.OOM && c.Measured.GiB != nil && c.Measured.Kind != KindProcess
}

// trusted: a measured (not simulated), high- or medium-trust case.
func trusted(c Case) bool { return !c.Simulated && c.Trust != "low" }

// Fit fits the default estimator's coefficients on the high- and
// medium-trust, supported, non-OOM measured cases (simulated rows are left
// out): Gauss–Newton steps solved by
// non-negative least squares on relative errors, reweighted with Huber
// weights. It is deterministic: the same cases give the same coefficients.
func Fit(cases []Case, cohort string) (*Calibration, error) {
	var rows []fitRow
	for _, c := range cases {
		if !fitKind(c) {
			continue
		}
		req, _, why := RequestFor(c)
		if why != "" {
			continue
		}
		if _, err := (estimate.PhasePeak{Coef: FitStart}).Estimate(req); err != nil {
			continue
		}
		rows = append(rows, fitRow{c: c, req: req, y: *c.Measured.GiB * estimate.GiB})
	}
	if len(rows) < len(fitParams)+2 {
		return nil, fmt.Errorf("%w: %d rows for %d coefficients", ErrNothingToFit, len(rows), len(fitParams))
	}
	k := FitStart
	weights := make([]float64, len(rows))
	for i := range weights {
		weights[i] = 1
	}
	predict := func(k estimate.Coefficients, r fitRow) float64 {
		e, err := (estimate.PhasePeak{Coef: k}).Estimate(r.req)
		if err != nil {
			return math.NaN()
		}
		b, _ := e.Levels.Level(r.c.Measured.Kind)
		return float64(b)
	}
	loss := func(k estimate.Coefficients) float64 {
		var s float64
		for i, r := range rows {
			d := (predict(k, r) - r.y) / r.y
			s += weights[i] * d * d
		}
		return s
	}
	for outer := 0; outer < 8; outer++ {
		for iter := 0; iter < 40; iter++ {
			A := make([][]float64, len(rows))
			b := make([]float64, len(rows))
			for i, r := range rows {
				p0 := predict(k, r)
				w := math.Sqrt(weights[i]) / r.y
				A[i] = make([]float64, len(fitParams))
				rhs := r.y - p0
				for j, fp := range fitParams {
					kk := k
					*fp.get(&kk) += fp.scale
					d := (predict(kk, r) - p0) / fp.scale
					A[i][j] = w * d
					rhs += d * *fp.get(&k)
				}
				b[i] = w * rhs
			}
			// Floors by substitution: x = lower + x', x' ≥ 0.
			for i := range A {
				for j, fp := range fitParams {
					b[i] -= A[i][j] * fp.lower
				}
			}
			x, err := nnls(A, b)
			if err != nil {
				return nil, err
			}
			for j, fp := range fitParams {
				x[j] += fp.lower
			}
			next := k
			for j, fp := range fitParams {
				*fp.get(&next) = x[j]
			}
			// Damped step: piecewise-linear phases can make a full step overshoot.
			before := loss(k)
			step := 1.0
			for ; step > 1e-3; step /= 2 {
				trial := k
				for _, fp := range fitParams {
					*fp.get(&trial) = *fp.get(&k) + step*(*fp.get(&next)-*fp.get(&k))
				}
				if loss(trial) <= before {
					next = trial
					break
				}
			}
			if step <= 1e-3 {
				break
			}
			moved := 0.0
			for _, fp := range fitParams {
				moved = math.Max(moved, math.Abs(*fp.get(&next)-*fp.get(&k))/math.Max(1e-3, math.Abs(*fp.get(&k))))
			}
			k = next
			if moved < 1e-7 {
				break
			}
		}
		for i, r := range rows {
			d := math.Abs(predict(k, r)-r.y) / r.y
			weights[i] = 1
			if d > huberK {
				weights[i] = huberK / d
			}
		}
	}
	for _, fp := range fitParams {
		*fp.get(&k) = roundSig(*fp.get(&k), 4)
	}
	cal := &Calibration{
		SchemaVersion: 1, Estimator: "canifinetune", EstimatorVersion: estimate.PhasePeak{}.Version(),
		Cohort: cohort, Coefficients: k,
		Method: "Gauss–Newton on relative error, each step a non-negative least-squares solve, Huber reweighting (k = 10 %); trust high+medium, supported, non-OOM rows; logits_bytes (oracle-determined) and context_gib fixed",
	}
	var results []CaseResult
	dom := map[string]map[string]bool{"types": {}, "methods": {}, "stacks": {}}
	gmin, gmax := math.Inf(1), 0.0
	for i, r := range rows {
		p := predict(k, r)
		e := (p - r.y) / r.y * 100
		cal.Rows = append(cal.Rows, r.c.ID)
		cal.Residuals = append(cal.Residuals, Residual{ID: r.c.ID, Kind: r.c.Measured.Kind,
			MeasuredGiB: round3(r.y / estimate.GiB), FittedGiB: round3(p / estimate.GiB), ErrorPct: round3(e), Weight: round3(weights[i])})
		ep := round3(e)
		m := round3(r.y / estimate.GiB)
		results = append(results, CaseResult{ID: r.c.ID, Status: StatusOK, ErrorPct: &ep, MeasuredGiB: &m})
		dom["types"][r.req.Model.ModelType] = true
		dom["methods"][string(r.req.Method)] = true
		dom["stacks"][string(r.req.Stack)] = true
		if r.req.GPUTotal > 0 {
			g := bytesize.InGiB(r.req.GPUTotal)
			gmin, gmax = math.Min(gmin, g), math.Max(gmax, g)
		}
	}
	cal.Summary = Summarize(results)
	keys := func(m map[string]bool) []string {
		var s []string
		for x := range m {
			s = append(s, x)
		}
		sort.Strings(s)
		return s
	}
	if math.IsInf(gmin, 1) {
		gmin = 0 // no row names its card: +Inf is not a JSON number
	}
	cal.Domain = Domain{ModelTypes: keys(dom["types"]), Methods: keys(dom["methods"]), Stacks: keys(dom["stacks"]), GPUMemGiB: [2]float64{round3(gmin), round3(gmax)}}
	// What calibrate writes, its loader must accept.
	if err := cal.Validate(); err != nil {
		return nil, fmt.Errorf("the fit is not a usable calibration: %w", err)
	}
	return cal, nil
}

func roundSig(x float64, digits int) float64 {
	if x == 0 {
		return 0
	}
	p := math.Pow(10, float64(digits)-math.Ceil(math.Log10(math.Abs(x))))
	return math.Round(x*p) / p
}

// Calibrated is the default estimator with a calibration's coefficients,
// applied only inside the calibration's domain; outside it the embedded
// coefficients are used and the estimate says so.
type Calibrated struct {
	Cal *Calibration
	// File names the calibration file in notes.
	File string
}

// Name implements estimate.Estimator.
func (c Calibrated) Name() string { return "canifinetune" }

// Version implements estimate.Estimator.
func (c Calibrated) Version() string { return estimate.PhasePeak{}.Version() + "+calibrated" }

// Describe implements estimate.Estimator.
func (c Calibrated) Describe() string {
	return "the default estimator with coefficients from " + c.File
}

// inner is the default estimator a request is estimated with: the
// calibration's coefficients inside its domain, the embedded ones outside
// it (why says why, "" inside).
func (c Calibrated) inner(r estimate.Request) (est estimate.PhasePeak, why string) {
	if ok, why := c.Cal.Domain.Contains(r); !ok {
		return estimate.PhasePeak{Coef: estimate.DefaultCoefficients, CoefSource: "embedded"}, why
	}
	return estimate.PhasePeak{Coef: c.Cal.Coefficients, CoefSource: "calibration " + c.File}, ""
}

// Estimate implements estimate.Estimator.
func (c Calibrated) Estimate(r estimate.Request) (*estimate.Estimate, error) {
	est, why := c.inner(r)
	e, err := est.Estimate(r)
	if err == nil && why == "" {
		e.Version = c.Version()
	}
	return e, err
}

// Explain implements estimate.Estimator: the default estimator's
// explanation, saying which coefficients it used.
func (c Calibrated) Explain(r estimate.Request, e *estimate.Estimate) (estimate.Explanation, error) {
	est, why := c.inner(r)
	x, err := est.Explain(r, e)
	if err != nil {
		return x, err
	}
	if why != "" {
		x.Assumptions = append(x.Assumptions, fmt.Sprintf("calibration %s not applied: %s", c.File, why))
	} else {
		x.Assumptions = append(x.Assumptions, "coefficients from calibration "+c.File)
	}
	return x, nil
}
