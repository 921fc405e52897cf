package evidence

import (
	"fmt"
	"math"
	"sort"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/internal/bytesize"
)

// Case statuses in a report.
const (
	StatusOK          = "ok"
	StatusUnsupported = "unsupported"
	StatusOOM         = "oom"
)

// CaseResult is one case scored against one estimator.
type CaseResult struct {
	ID        string `json:"id"`
	Model     string `json:"model"`
	Method    string `json:"method"`
	Framework string `json:"framework"`
	Trust     string `json:"trust,omitempty"`
	Kind      string `json:"kind"`
	Status    string `json:"status"`
	// MeasuredGiB is absent for OOM rows: an OOM has no exact peak. An
	// unsupported case still carries its measured peak.
	MeasuredGiB  *float64 `json:"measured_gib,omitempty"`
	EstimatedGiB *float64 `json:"estimated_gib,omitempty"`
	// ErrorPct is (estimated − measured) / measured × 100: positive over-estimates.
	ErrorPct    *float64           `json:"error_pct,omitempty"`
	Verdict     string             `json:"verdict,omitempty"`
	Unsupported string             `json:"unsupported,omitempty"`
	Assumed     []string           `json:"assumed,omitempty"`
	Components  map[string]float64 `json:"components_gib,omitempty"`
}

// Summary is the error distribution of a set of scored cases.
type Summary struct {
	N int `json:"n"`
	// MAPE is the mean absolute percentage error.
	MAPE         float64 `json:"mape"`
	MedianAbs    float64 `json:"median_abs_error_pct"`
	MedianSigned float64 `json:"median_signed_error_pct"`
	P90Abs       float64 `json:"p90_abs_error_pct"`
	// WorstUnder is the most negative signed error (an under-estimate is the
	// dangerous direction: the run OOMs though the tool said it fits).
	WorstUnder   *float64 `json:"worst_under_pct,omitempty"`
	WorstUnderID string   `json:"worst_under_id,omitempty"`
	Unsupported  int      `json:"unsupported"`
	OOM          int      `json:"oom"`
}

// Classification is seed 000's prospective report of verdicts against
// outcomes, with matched denominators: of the rows predicted yes, how many
// OOMed; of the rows predicted no, how many succeeded. Marginal and unknown
// verdicts are excluded from both rates and counted.
type Classification struct {
	Rows            int `json:"rows"`
	PredictedYes    int `json:"predicted_yes"`
	PredictedYesOOM int `json:"predicted_yes_then_oom"`
	PredictedNo     int `json:"predicted_no"`
	PredictedNoOK   int `json:"predicted_no_then_success"`
	Marginal        int `json:"marginal_excluded"`
	Unknown         int `json:"unknown_excluded"`
}

// Report is an estimator scored on a set of cases.
type Report struct {
	Estimator      string             `json:"estimator"`
	Version        string             `json:"version"`
	Cases          []CaseResult       `json:"cases"`
	Summary        Summary            `json:"summary"`
	ByMethod       map[string]Summary `json:"by_method"`
	BySource       map[string]Summary `json:"by_source"`
	ByTrust        map[string]Summary `json:"by_trust"`
	Classification Classification     `json:"classification"`
}

// Score estimates every case and compares with its measured figure of the
// same kind.
func Score(cases []Case, est estimate.Estimator) Report {
	rs := make([]CaseResult, 0, len(cases))
	for _, c := range cases {
		rs = append(rs, ScoreCase(c, Predict(est, c)))
	}
	return Aggregate(est.Name(), est.Version(), cases, rs)
}

// ScoreCase compares one prediction with its case.
func ScoreCase(c Case, p Prediction) CaseResult {
	r := CaseResult{ID: c.ID, Model: c.Model, Method: c.Method, Framework: c.Framework, Trust: c.Trust, Kind: c.Measured.Kind, Assumed: p.Assumed}
	if p.Estimate == nil {
		r.Status, r.Unsupported, r.MeasuredGiB = StatusUnsupported, p.Unsupported, c.Measured.GiB
		return r
	}
	est := round3(bytesize.InGiB(p.Predicted(c.Measured.Kind)))
	r.EstimatedGiB = &est
	r.Verdict = string(p.Estimate.Verdict.Fit)
	r.Components = map[string]float64{}
	for _, comp := range p.Estimate.Components {
		r.Components[string(comp.Name)] = round3(bytesize.InGiB(comp.Bytes))
	}
	if c.Measured.OOM {
		r.Status = StatusOOM
		return r
	}
	m := *c.Measured.GiB
	e := round3((est - m) / m * 100)
	if math.IsNaN(e) || math.IsInf(e, 0) {
		// ReadCases refuses such a measurement; a Case built in code may
		// still carry one, and a JSON report cannot hold the result.
		r.Status, r.Unsupported, r.MeasuredGiB = StatusUnsupported, fmt.Sprintf("measured.gib %v gives no finite error", m), c.Measured.GiB
		return r
	}
	r.MeasuredGiB, r.ErrorPct, r.Status = &m, &e, StatusOK
	return r
}

// Summarize computes the error distribution over the ok rows.
func Summarize(rs []CaseResult) Summary {
	var s Summary
	var abs, signed []float64
	for _, r := range rs {
		switch r.Status {
		case StatusUnsupported:
			s.Unsupported++
			continue
		case StatusOOM:
			s.OOM++
			continue
		}
		e := *r.ErrorPct
		signed = append(signed, e)
		abs = append(abs, math.Abs(e))
		if s.WorstUnder == nil || e < *s.WorstUnder {
			v := e
			s.WorstUnder, s.WorstUnderID = &v, r.ID
		}
	}
	s.N = len(abs)
	if s.N == 0 {
		return s
	}
	var sum float64
	for _, a := range abs {
		sum += a
	}
	s.MAPE = round3(sum / float64(s.N))
	s.MedianAbs = round3(Quantile(abs, 0.5))
	s.MedianSigned = round3(Quantile(signed, 0.5))
	s.P90Abs = round3(Quantile(abs, 0.9))
	return s
}

// Quantile is the linear-interpolation quantile (type 7, numpy's default) of xs.
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

func group(rs []CaseResult, key func(CaseResult) string) map[string]Summary {
	by := map[string][]CaseResult{}
	for _, r := range rs {
		by[key(r)] = append(by[key(r)], r)
	}
	out := map[string]Summary{}
	for k, v := range by {
		out[k] = Summarize(v)
	}
	return out
}

// Classify builds the verdict-vs-outcome report over OOM rows and rows
// measured against a known card.
func Classify(cases []Case, rs []CaseResult) Classification {
	var cl Classification
	for i, r := range rs {
		c := cases[i]
		if r.Status == StatusUnsupported || (c.GPU.VRAMGiB == nil && c.GPU.Name == nil) {
			continue
		}
		cl.Rows++
		switch estimate.Fit(r.Verdict) {
		case estimate.FitYes:
			cl.PredictedYes++
			if c.Measured.OOM {
				cl.PredictedYesOOM++
			}
		case estimate.FitNo:
			cl.PredictedNo++
			if !c.Measured.OOM {
				cl.PredictedNoOK++
			}
		case estimate.FitMarginal:
			cl.Marginal++
		default:
			cl.Unknown++
		}
	}
	return cl
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }
