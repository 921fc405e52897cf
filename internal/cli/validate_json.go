package cli

import (
	"fmt"
	"math"

	"github.com/canifinetune/canifinetune/evidence"
)

// ValidateSchemaVersion is the schema_version of validate --json. It changes
// only when a field is renamed or removed, or its meaning changes; new fields
// may appear without a change. docs/validate-json.md documents the schema.
const ValidateSchemaVersion = 1

// ValidateJSON is the --json output of validate.
type ValidateJSON struct {
	SchemaVersion int               `json:"schema_version"`
	Input         validateInputJSON `json:"input"`
	// Estimators holds one report per estimator, in command-line order
	// (--estimator, then --compare), each over every selected case.
	Estimators []reportJSON `json:"estimators"`
	// Calibration is present with --calibration.
	Calibration *calibrationJSON `json:"calibration,omitempty"`
	// Comparison is present when more than one estimator is scored.
	Comparison *comparisonJSON `json:"comparison,omitempty"`
	// CrossValidation is the stored leave-one-source-family-out check of the
	// default estimator on this cohort, present when one is found.
	CrossValidation *CrossValidationJSON `json:"cross_validation,omitempty"`
	// Cases holds one entry per selected case and estimator: case order, then
	// estimator order.
	Cases []validateCaseJSON `json:"cases"`
}

type validateInputJSON struct {
	File     string   `json:"file"`
	Cases    int      `json:"cases"`
	Selected int      `json:"selected"`
	Trust    []string `json:"trust,omitempty"`
	Method   []string `json:"method,omitempty"`
}

type reportJSON struct {
	Name     string                 `json:"name"`
	Version  string                 `json:"version"`
	Summary  summaryJSON            `json:"summary"`
	ByMethod map[string]summaryJSON `json:"by_method"`
	BySource map[string]summaryJSON `json:"by_source"`
	ByTrust  map[string]summaryJSON `json:"by_trust"`
	// By holds the --by groupings (absent without --by, and inside comparison).
	By                 map[string]map[string]groupSummaryJSON `json:"by,omitempty"`
	Classification     classificationJSON                     `json:"classification"`
	UnsupportedReasons []evidence.ReasonCount                 `json:"unsupported_reasons"`
}

// summaryJSON leaves out every statistic of an empty set: unknown is absent,
// never zero.
type summaryJSON struct {
	N            int      `json:"n"`
	OOM          int      `json:"oom"`
	Unsupported  int      `json:"unsupported"`
	MAPE         *float64 `json:"mape_pct,omitempty"`
	MedianAbs    *float64 `json:"median_abs_error_pct,omitempty"`
	MedianSigned *float64 `json:"median_signed_error_pct,omitempty"`
	P90Abs       *float64 `json:"p90_abs_error_pct,omitempty"`
	// WorstUnder is present only when some case is under-estimated.
	WorstUnder   *float64 `json:"worst_under_pct,omitempty"`
	WorstUnderID string   `json:"worst_under_id,omitempty"`
}

type classificationJSON struct {
	Rows                   int      `json:"rows"`
	PredictedYes           int      `json:"predicted_yes"`
	PredictedYesOOM        int      `json:"predicted_yes_then_oom"`
	PredictedYesOOMRate    *float64 `json:"predicted_yes_then_oom_rate,omitempty"`
	PredictedNo            int      `json:"predicted_no"`
	PredictedNoSuccess     int      `json:"predicted_no_then_success"`
	PredictedNoSuccessRate *float64 `json:"predicted_no_then_success_rate,omitempty"`
	MarginalExcluded       int      `json:"marginal_excluded"`
	UnknownExcluded        int      `json:"unknown_excluded"`
	NoCardExcluded         int      `json:"no_card_excluded"`
	UnsupportedExcluded    int      `json:"unsupported_excluded"`
}

type comparisonJSON struct {
	// Rows is how many selected cases every estimator supports; the reports
	// below are over exactly these.
	Rows        int          `json:"rows"`
	Excluded    int          `json:"excluded"`
	ExcludedIDs []string     `json:"excluded_ids"`
	Estimators  []reportJSON `json:"estimators"`
}

type validateCaseJSON struct {
	Estimator string `json:"estimator"`
	// EstimatorVersion tells a calibrated estimator from the same one
	// uncalibrated (both are named canifinetune).
	EstimatorVersion string `json:"estimator_version"`
	evidence.CaseResult
}

// newValidateJSON lays out the reports of every estimator on the selected
// cases, and their same-observation comparison when there are several.
func newValidateJSON(file string, total int, f evidence.Filter, cases []evidence.Case, reps []evidence.Report) (ValidateJSON, error) {
	out := ValidateJSON{
		SchemaVersion: ValidateSchemaVersion,
		Input:         validateInputJSON{File: file, Cases: total, Selected: len(cases), Trust: f.Trust, Method: f.Method},
		Cases:         []validateCaseJSON{},
	}
	for _, r := range reps {
		out.Estimators = append(out.Estimators, newReportJSON(r, len(cases)))
	}
	if len(reps) > 1 {
		kept, same, err := evidence.SameObservations(cases, reps)
		if err != nil {
			return out, fmt.Errorf("compare estimators: %w", err)
		}
		cmp := &comparisonJSON{Rows: len(kept), Excluded: len(cases) - len(kept), ExcludedIDs: []string{}}
		in := map[string]bool{}
		for _, c := range kept {
			in[c.ID] = true
		}
		for _, c := range cases {
			if !in[c.ID] {
				cmp.ExcludedIDs = append(cmp.ExcludedIDs, c.ID)
			}
		}
		for _, r := range same {
			cmp.Estimators = append(cmp.Estimators, newReportJSON(r, len(kept)))
		}
		out.Comparison = cmp
	}
	for i := range cases {
		for _, r := range reps {
			cr := r.Cases[i]
			out.Cases = append(out.Cases, validateCaseJSON{Estimator: r.Estimator, EstimatorVersion: r.Version, CaseResult: cr})
		}
	}
	return out, nil
}

// newReportJSON converts a report over n cases.
func newReportJSON(r evidence.Report, n int) reportJSON {
	out := reportJSON{
		Name: r.Estimator, Version: r.Version,
		Summary:            newSummaryJSON(r.Summary),
		ByMethod:           summariesJSON(r.ByMethod),
		BySource:           summariesJSON(r.BySource),
		ByTrust:            summariesJSON(r.ByTrust),
		UnsupportedReasons: evidence.UnsupportedReasons(r.Cases),
	}
	if out.UnsupportedReasons == nil {
		out.UnsupportedReasons = []evidence.ReasonCount{}
	}
	cl := r.Classification
	out.Classification = classificationJSON{
		Rows: cl.Rows, PredictedYes: cl.PredictedYes, PredictedYesOOM: cl.PredictedYesOOM,
		PredictedNo: cl.PredictedNo, PredictedNoSuccess: cl.PredictedNoOK,
		MarginalExcluded: cl.Marginal, UnknownExcluded: cl.Unknown,
		UnsupportedExcluded: r.Summary.Unsupported,
		// evidence.Classify counts only supported rows measured against a
		// known card; what is left of the supported rows had no card.
		NoCardExcluded:         n - r.Summary.Unsupported - cl.Rows,
		PredictedYesOOMRate:    rate(cl.PredictedYesOOM, cl.PredictedYes),
		PredictedNoSuccessRate: rate(cl.PredictedNoOK, cl.PredictedNo),
	}
	return out
}

func newSummaryJSON(s evidence.Summary) summaryJSON {
	out := summaryJSON{N: s.N, OOM: s.OOM, Unsupported: s.Unsupported}
	if s.N == 0 {
		return out
	}
	out.MAPE, out.MedianAbs, out.MedianSigned, out.P90Abs = ptr(s.MAPE), ptr(s.MedianAbs), ptr(s.MedianSigned), ptr(s.P90Abs)
	if s.WorstUnder != nil && *s.WorstUnder < 0 {
		out.WorstUnder, out.WorstUnderID = ptr(*s.WorstUnder), s.WorstUnderID
	}
	return out
}

func summariesJSON(m map[string]evidence.Summary) map[string]summaryJSON {
	out := make(map[string]summaryJSON, len(m))
	for k, s := range m {
		if k == "" {
			k = "unstated" // a case may leave trust empty; a JSON key of "" reads as a bug
		}
		out[k] = newSummaryJSON(s)
	}
	return out
}

// rate is k/n rounded to 4 digits; nil when n is 0 (no denominator, no rate).
func rate(k, n int) *float64 {
	if n == 0 {
		return nil
	}
	return ptr(math.Round(float64(k)/float64(n)*1e4) / 1e4)
}

func ptr(x float64) *float64 { return &x }

type calibrationJSON struct {
	File      string `json:"file"`
	Estimator string `json:"estimator"`
	Cohort    string `json:"cohort"`
	// Applied counts the selected supported cases inside the domain; the
	// others are estimated with the embedded coefficients.
	Applied           int                    `json:"applied"`
	NotApplied        int                    `json:"not_applied"`
	NotAppliedReasons []evidence.ReasonCount `json:"not_applied_reasons"`
}

// newCalibrationJSON says on which cases a calibration was applied: the
// calibrated estimator falls back to its embedded coefficients outside the
// calibration's domain, and a report must not pass those rows off as
// calibrated. Cases that cannot be turned into a request are unsupported and
// counted there, not here.
func newCalibrationJSON(file string, cal *evidence.Calibration, cases []evidence.Case) *calibrationJSON {
	out := &calibrationJSON{File: file, Estimator: cal.Estimator, Cohort: cal.Cohort}
	var outside []evidence.CaseResult
	for _, c := range cases {
		req, _, why := evidence.RequestFor(c)
		if why != "" {
			continue
		}
		if ok, reason := cal.Domain.Contains(req); !ok {
			// Grouped like unsupported reasons: same shape, same order.
			outside = append(outside, evidence.CaseResult{ID: c.ID, Status: evidence.StatusUnsupported, Unsupported: reason})
			continue
		}
		out.Applied++
	}
	out.NotApplied = len(outside)
	out.NotAppliedReasons = evidence.UnsupportedReasons(outside)
	if out.NotAppliedReasons == nil {
		out.NotAppliedReasons = []evidence.ReasonCount{}
	}
	return out
}
