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
}

// CrossValidation is a leave-one-family-out check of how the fit
// generalises: each source family (the case id without its number:
// litgpt-rt, swift, fsdpqlora, …) is scored with coefficients fitted on the
// others, so no held-out row pulled on the coefficients that predict it.
type CrossValidation struct {
	Cohort string `json:"cohort"`
	Folds  []Fold `json:"folds"`
	// HeldOut pools every fold's held-out rows; InSample is the same rows
	// under the fit on the whole cohort.
	HeldOut  Summary      `json:"held_out"`
	InSample Summary      `json:"in_sample"`
	Cases    []CaseResult `json:"cases"`
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
// point of holding it out.
func CrossValidate(cases []Case, full *Calibration) (*CrossValidation, error) {
	cohort := full.Cohort
	var families []string
	for _, c := range cases {
		if f := Family(c.ID); !slices.Contains(families, f) {
			families = append(families, f)
		}
	}
	slices.Sort(families)
	cv := &CrossValidation{Cohort: cohort}
	var held, in []CaseResult
	for _, fam := range families {
		var train, test []Case
		for _, c := range cases {
			if Family(c.ID) == fam {
				if fitKind(c) {
					// A row the full fit could not use (process-level
					// figures, e.g. the encoder rows) has no fold to be
					// held out of.
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
		var out []CaseResult
		for _, c := range test {
			if r := ScoreCase(c, Predict(est, c)); r.Status == StatusOK {
				out = append(out, r)
			}
		}
		cv.Folds = append(cv.Folds, Fold{Family: fam, FittedRows: len(cal.Rows), Coefficients: cal.Coefficients,
			Summary: Summarize(out), InSample: Summarize(fold)})
		held = append(held, out...)
		in = append(in, fold...)
	}
	cv.HeldOut, cv.InSample, cv.Cases = Summarize(held), Summarize(in), held
	return cv, nil
}
