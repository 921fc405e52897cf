package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/evidence"
)

// crossValidationFile is the name validate looks for beside its cases file:
// the leave-one-source-family-out figures that 'calibrate
// --cross-validation-output' stored for that cohort.
const crossValidationFile = "crossval.json"

// Targets the leave-one-family-out figures are held to.
const (
	targetMedianPct     = 4.0
	targetP90Pct        = 12.0
	targetWorstUnderPct = -10.0
)

// CrossValidationJSON is validate's view of a stored cross-validation: per
// source family, the left-out fit's errors beside the fitted (in-sample)
// ones and the best reference estimator's.
type CrossValidationJSON struct {
	File   string `json:"file"`
	Cohort string `json:"cohort"`
	// Current is false when the file was produced with other coefficients
	// than the ones the default estimator embeds: its figures are stale.
	Current  bool       `json:"current"`
	Families []FamilyCV `json:"families"`
	All      FamilyCV   `json:"all"`
}

// FamilyCV is one source family (or "all", pooled) of a cross-validation.
type FamilyCV struct {
	Family string `json:"family"`
	N      int    `json:"n"`
	// Left out: the family's rows scored with coefficients fitted without it.
	MedianAbs float64 `json:"median_abs_error_pct"`
	P90Abs    float64 `json:"p90_abs_error_pct"`
	HighN     int     `json:"high_n"`
	// WorstUnderHigh is the most negative error on the family's high-trust rows.
	WorstUnderHigh *float64 `json:"worst_under_high_pct,omitempty"`
	OOMRows        int      `json:"oom_rows"`
	OOMPredictedNo int      `json:"oom_predicted_no"`
	// Fitted: the same rows under the fit on every family.
	FittedMedianAbs float64 `json:"fitted_median_abs_error_pct"`
	FittedP90Abs    float64 `json:"fitted_p90_abs_error_pct"`
	// The reference estimator with the lowest median |error| on the rows it
	// and the left-out fit both estimate, and both medians on those rows.
	BestReference          string   `json:"best_reference,omitempty"`
	ReferenceN             int      `json:"reference_n,omitempty"`
	ReferenceMedianAbs     *float64 `json:"reference_median_abs_error_pct,omitempty"`
	LeftOutMedianAbsOnRefs *float64 `json:"left_out_median_abs_error_pct_on_reference_rows,omitempty"`
	// Missed names the targets this family misses.
	Missed []string `json:"missed"`
}

// findCrossValidation returns the stored cross-validation validate shows for
// casesFile: explicit (--cross-validation) or crossval.json beside the cases
// file when its cohort is that file. A missing crossval.json is no error.
func findCrossValidation(casesFile, explicit string) (*evidence.CrossValidation, string, error) {
	path := explicit
	if path == "" {
		path = filepath.Join(filepath.Dir(casesFile), crossValidationFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		if explicit == "" && errors.Is(err, fs.ErrNotExist) {
			return nil, "", nil
		}
		return nil, "", withCode(ExitError, fmt.Errorf("read cross-validation: %w", err))
	}
	var cv evidence.CrossValidation
	if err := json.Unmarshal(b, &cv); err != nil {
		return nil, "", withCode(ExitError, fmt.Errorf("cross-validation %s: %w", path, err))
	}
	if cv.Cohort != filepath.Base(casesFile) {
		if explicit != "" {
			return nil, "", withCode(ExitError, fmt.Errorf("cross-validation %s: cohort %q, not the cases file %s", path, cv.Cohort, filepath.Base(casesFile)))
		}
		return nil, "", nil
	}
	return &cv, path, nil
}

// newCrossValidationJSON turns a stored cross-validation into validate's
// per-family table, with the targets each family misses.
func newCrossValidationJSON(path string, cv *evidence.CrossValidation) *CrossValidationJSON {
	out := &CrossValidationJSON{File: path, Cohort: cv.Cohort, Current: cv.Coefficients == estimate.DefaultCoefficients}
	var oom, oomNo int
	for _, f := range cv.Folds {
		fc := FamilyCV{Family: f.Family, N: f.Summary.N, MedianAbs: f.Summary.MedianAbs, P90Abs: f.Summary.P90Abs,
			HighN: f.HighTrust.N, WorstUnderHigh: f.HighTrust.WorstUnder, OOMRows: f.OOMRows, OOMPredictedNo: f.OOMPredictedNo,
			FittedMedianAbs: f.InSample.MedianAbs, FittedP90Abs: f.InSample.P90Abs}
		for _, r := range f.References {
			if r.Reference.N == 0 {
				continue
			}
			if fc.ReferenceMedianAbs == nil || r.Reference.MedianAbs < *fc.ReferenceMedianAbs {
				ref, mine := r.Reference.MedianAbs, r.Fold.MedianAbs
				fc.BestReference, fc.ReferenceN, fc.ReferenceMedianAbs, fc.LeftOutMedianAbsOnRefs = r.Estimator, r.Reference.N, &ref, &mine
			}
		}
		fc.Missed = missedTargets(fc)
		out.Families = append(out.Families, fc)
		oom, oomNo = oom+f.OOMRows, oomNo+f.OOMPredictedNo
	}
	out.All = FamilyCV{Family: "all", N: cv.HeldOut.N, MedianAbs: cv.HeldOut.MedianAbs, P90Abs: cv.HeldOut.P90Abs,
		HighN: cv.HeldOutHigh.N, WorstUnderHigh: cv.HeldOutHigh.WorstUnder, OOMRows: oom, OOMPredictedNo: oomNo,
		FittedMedianAbs: cv.InSample.MedianAbs, FittedP90Abs: cv.InSample.P90Abs}
	out.All.Missed = missedTargets(out.All)
	return out
}

// missedTargets lists the targets a family misses: median and p90 |error|,
// the worst under-estimate on high-trust rows, OOM rows predicted "no", and
// a lower median than the best reference estimator on the same rows.
func missedTargets(f FamilyCV) []string {
	missed := []string{}
	if f.MedianAbs > targetMedianPct {
		missed = append(missed, "median")
	}
	if f.P90Abs > targetP90Pct {
		missed = append(missed, "p90")
	}
	if f.WorstUnderHigh != nil && *f.WorstUnderHigh < targetWorstUnderPct {
		missed = append(missed, "worst-under")
	}
	if f.OOMPredictedNo < f.OOMRows {
		missed = append(missed, "oom")
	}
	if f.ReferenceMedianAbs != nil && *f.LeftOutMedianAbsOnRefs >= *f.ReferenceMedianAbs {
		missed = append(missed, "reference")
	}
	return missed
}

// printCrossValidationFirst writes the leave-one-family-out table that
// validate shows before its fitted figures.
func printCrossValidationFirst(w io.Writer, cv *CrossValidationJSON) {
	fmt.Fprintf(w, "\ngeneralisation (%s): each source family scored with coefficients fitted without it; trust high and medium\n", cv.File)
	if !cv.Current {
		fmt.Fprintf(w, "STALE: %s was produced with other coefficients than this estimator's; re-run\n  canifinetune calibrate %s -o estimate/coefficients.json --cross-validation-output %s\n", cv.File, cv.Cohort, cv.File)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "family\tn\tleft-out median\tp90\tworst under (high)\tOOM → no\tbest reference (median, n)\tleft-out on its rows\tfitted median\tp90\tmissed\t")
	row := func(f FamilyCV) {
		worst := "—"
		if f.WorstUnderHigh != nil {
			worst = fmt.Sprintf("%+.1f%% (%d)", *f.WorstUnderHigh, f.HighN)
		}
		oom := "—"
		if f.OOMRows > 0 {
			oom = fmt.Sprintf("%d/%d", f.OOMPredictedNo, f.OOMRows)
		}
		ref, mine := "—", "—"
		if f.ReferenceMedianAbs != nil {
			ref = fmt.Sprintf("%s %.1f%% (%d)", f.BestReference, *f.ReferenceMedianAbs, f.ReferenceN)
			mine = fmt.Sprintf("%.1f%%", *f.LeftOutMedianAbsOnRefs)
		}
		missed := strings.Join(f.Missed, ",")
		if missed == "" {
			missed = "none"
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f%%\t%.1f%%\t%s\t%s\t%s\t%s\t%.1f%%\t%.1f%%\t%s\t\n",
			f.Family, f.N, f.MedianAbs, f.P90Abs, worst, oom, ref, mine, f.FittedMedianAbs, f.FittedP90Abs, missed)
	}
	for _, f := range cv.Families {
		row(f)
	}
	row(cv.All)
	tw.Flush()
	fmt.Fprintf(w, "targets: left-out median ≤ %.0f %%, p90 ≤ %.0f %%, worst under-estimate on high-trust rows ≥ %.0f %%, every OOM row predicted no, below the best reference's median on its rows\n",
		targetMedianPct, targetP90Pct, targetWorstUnderPct)
	fmt.Fprintln(w, "\nfitted figures (the coefficients were fitted on these rows):")
}
