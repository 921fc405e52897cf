package evidence

import (
	"fmt"
	"slices"
	"strings"

	"github.com/canifinetune/canifinetune/estimate"
)

// Fold is one held-out source family of a cross-validation: the
// coefficients fitted without it and its rows scored with them.
type Fold struct {
	Family       string                `json:"family"`
	FittedRows   int                   `json:"fitted_rows"`
	Coefficients estimate.Coefficients `json:"coefficients"`
	// Summary is the held-out rows' errors (trust high and medium, supported,
	// non-OOM), InSample the same rows under the fit on every family.
	Summary  Summary `json:"held_out"`
	InSample Summary `json:"in_sample"`
	// HighTrust is Summary over the held-out rows of trust high only, whose
	// worst under-estimate is the figure held to the −10 % target.
	HighTrust Summary `json:"held_out_high"`
	// OOMRows counts the family's rows (trust high and medium) that ran out of
	// memory and the fold's estimator supports; OOMPredictedNo how many of
	// them it predicts "no".
	OOMRows        int `json:"oom_rows"`
	OOMPredictedNo int `json:"oom_predicted_no"`
	// References scores each reference estimator on the family against the
	// fold, on the held-out rows both of them estimate.
	References []ReferenceFold `json:"references,omitempty"`
}

// ReferenceFold compares a reference estimator with a fold on the held-out
// rows that both estimate: Fold is the left-out fit's errors on those rows,
// Reference the reference estimator's.
type ReferenceFold struct {
	Estimator string  `json:"estimator"`
	Fold      Summary `json:"fold"`
	Reference Summary `json:"reference"`
}

// CrossValidation is a leave-one-family-out check of how the fit
// generalises: each source family (the case id without its number:
// litgpt-rt, swift, fsdpqlora, …) is scored with coefficients fitted on the
// others, so no held-out row pulled on the coefficients that predict it.
type CrossValidation struct {
	Cohort string `json:"cohort"`
	// Coefficients are the fit on the whole cohort that InSample uses: a
	// reader of a stored cross-validation compares them with the estimator's
	// own to tell whether the file still describes it.
	Coefficients estimate.Coefficients `json:"coefficients"`
	Folds        []Fold                `json:"folds"`
	// HeldOut pools every fold's held-out rows; InSample is the same rows
	// under the fit on the whole cohort.
	HeldOut  Summary `json:"held_out"`
	InSample Summary `json:"in_sample"`
	// HeldOutHigh pools the folds' held-out rows of trust high.
	HeldOutHigh Summary      `json:"held_out_high"`
	Cases       []CaseResult `json:"cases"`
}

// Family is a case's source family: its id without the trailing number.
func Family(id string) string {
	if i := strings.LastIndexByte(id, '-'); i > 0 {
		return id[:i]
	}
	return id
}

// CrossValidate fits the default estimator once per source family with
// that family left out and scores the family's rows with the result; full
// is the fit on every family (from Fit on the same cases), which scores the
// same rows in sample. The
// coefficients are applied directly, not through a calibration's domain: a
// family whose stack no other family has is still scored, which is the
// point of holding it out. Each reference estimator in refs (seed000,
// unsloth, …) is scored on the same held-out rows, so that a fold can be
// set against the best estimator that needs no fit.
func CrossValidate(cases []Case, full *Calibration, refs ...estimate.Estimator) (*CrossValidation, error) {
	cohort := full.Cohort
	var families []string
	for _, c := range cases {
		if f := Family(c.ID); !slices.Contains(families, f) {
			families = append(families, f)
		}
	}
	slices.Sort(families)
	cv := &CrossValidation{Cohort: cohort, Coefficients: full.Coefficients}
	var held, in, highs []CaseResult
	for _, fam := range families {
		var train, test []Case
		for _, c := range cases {
			if Family(c.ID) == fam {
				// A row the full fit could not use (process-level
				// figures, e.g. the encoder rows) has no fold to be held
				// out of; an OOM row has no peak to fit but is kept, so
				// that the fold says whether it was predicted "no".
				if fitKind(c) || (trusted(c) && c.Measured.OOM) {
					test = append(test, c)
				}
			} else {
				train = append(train, c)
			}
		}
		var fold []CaseResult
		for _, c := range test {
			if r := ScoreCase(c, Predict(estimate.PhasePeak{Coef: full.Coefficients}, c)); r.Status == StatusOK {
				fold = append(fold, r)
			}
		}
		if len(fold) == 0 {
			continue // nothing of this family is scored (encoders, unsupported rows)
		}
		cal, err := Fit(train, cohort+" without "+fam)
		if err != nil {
			return nil, fmt.Errorf("fold %s: %w", fam, err)
		}
		est := estimate.PhasePeak{Coef: cal.Coefficients, CoefSource: "fitted without " + fam}
		f := Fold{Family: fam, FittedRows: len(cal.Rows), Coefficients: cal.Coefficients}
		var out, high []CaseResult
		byID := map[string]CaseResult{}
		for _, c := range test {
			r := ScoreCase(c, Predict(est, c))
			switch r.Status {
			case StatusOK:
				out = append(out, r)
				byID[c.ID] = r
				if c.Trust == "high" {
					high = append(high, r)
				}
			case StatusOOM:
				f.OOMRows++
				if r.Verdict == string(estimate.FitNo) {
					f.OOMPredictedNo++
				}
			}
		}
		for _, ref := range refs {
			var mine, theirs []CaseResult
			for _, c := range test {
				r, ok := byID[c.ID]
				if !ok {
					continue
				}
				if rr := ScoreCase(c, Predict(ref, c)); rr.Status == StatusOK {
					mine, theirs = append(mine, r), append(theirs, rr)
				}
			}
			f.References = append(f.References, ReferenceFold{Estimator: ref.Name(), Fold: Summarize(mine), Reference: Summarize(theirs)})
		}
		f.Summary, f.InSample, f.HighTrust = Summarize(out), Summarize(fold), Summarize(high)
		cv.Folds = append(cv.Folds, f)
		held, highs = append(held, out...), append(highs, high...)
		in = append(in, fold...)
	}
	cv.HeldOut, cv.InSample, cv.HeldOutHigh, cv.Cases = Summarize(held), Summarize(in), Summarize(highs), held
	return cv, nil
}
