package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/evidence"
	"github.com/google/go-cmp/cmp"
)

func TestMissedTargets(t *testing.T) {
	tests := []struct {
		name string
		f    FamilyCV
		want []string
	}{
		{"all met", FamilyCV{MedianAbs: 4, P90Abs: 12, WorstUnderHigh: ptr(-10), OOMRows: 2, OOMPredictedNo: 2,
			ReferenceMedianAbs: ptr(5), LeftOutMedianAbsOnRefs: ptr(3.9)}, []string{}},
		{"no high rows, no reference", FamilyCV{MedianAbs: 1, P90Abs: 2}, []string{}},
		{"every target missed", FamilyCV{MedianAbs: 4.1, P90Abs: 12.1, WorstUnderHigh: ptr(-10.1), OOMRows: 3, OOMPredictedNo: 2,
			ReferenceMedianAbs: ptr(5), LeftOutMedianAbsOnRefs: ptr(5)}, []string{"median", "p90", "worst-under", "oom", "reference"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, missedTargets(tt.f)); diff != "" {
				t.Errorf("missedTargets (-want +got):\n%s", diff)
			}
		})
	}
}

// writeCrossValCohort copies dev.jsonl into a temporary folder beside a
// crossval.json holding one fold with the given coefficients.
func writeCrossValCohort(t *testing.T, coef estimate.Coefficients) string {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile("../../evidence/dev.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	cases := filepath.Join(dir, "dev.jsonl")
	if err := os.WriteFile(cases, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cv := evidence.CrossValidation{Cohort: "dev.jsonl", Coefficients: coef, Folds: []evidence.Fold{{
		Family:    "fam",
		Summary:   evidence.Summary{N: 3, MedianAbs: 6.5, P90Abs: 9},
		InSample:  evidence.Summary{N: 3, MedianAbs: 2, P90Abs: 5},
		HighTrust: evidence.Summary{N: 2, WorstUnder: ptr(-12.5)},
		OOMRows:   1, OOMPredictedNo: 1,
		References: []evidence.ReferenceFold{
			{Estimator: "seed000", Fold: evidence.Summary{N: 3, MedianAbs: 6.5}, Reference: evidence.Summary{N: 3, MedianAbs: 20}},
			{Estimator: "unsloth", Fold: evidence.Summary{N: 2, MedianAbs: 7}, Reference: evidence.Summary{N: 2, MedianAbs: 4}},
		},
	}}}
	out, err := json.Marshal(cv)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, crossValidationFile), out, 0o644); err != nil {
		t.Fatal(err)
	}
	return cases
}

func runValidate(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := Main(append([]string{"validate"}, args...), Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	return out.String()
}

// validate finds crossval.json beside its cases file and prints the
// left-out figures before the fitted ones, with the best reference on its
// own rows and the targets missed.
func TestValidateShowsCrossValidationFirst(t *testing.T) {
	cases := writeCrossValCohort(t, estimate.DefaultCoefficients)
	out := runValidate(t, cases, "--trust", "high")
	gen, fitted, scored := strings.Index(out, "generalisation ("), strings.Index(out, "fitted figures"), strings.Index(out, "median |err|")
	if gen < 0 || fitted < gen || scored < fitted {
		t.Fatalf("want the generalisation table, then the fitted figures, then the scores; got:\n%s", out)
	}
	table := out[gen:fitted]
	for _, want := range []string{"fam", "6.5%", "-12.5% (2)", "1/1", "unsloth 4.0% (2)", "7.0%", "median,worst-under,reference"} {
		if !strings.Contains(table, want) {
			t.Errorf("generalisation table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(out, "STALE") {
		t.Errorf("current coefficients reported stale:\n%s", table)
	}
	var doc ValidateJSON
	if err := json.Unmarshal([]byte(runValidate(t, cases, "--json")), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.CrossValidation == nil || len(doc.CrossValidation.Families) != 1 || doc.CrossValidation.Families[0].BestReference != "unsloth" || !doc.CrossValidation.Current {
		t.Errorf("cross_validation = %+v", doc.CrossValidation)
	}
	// Another estimator is not what the stored figures describe.
	if out := runValidate(t, cases, "--estimator", "seed000"); strings.Contains(out, "generalisation") {
		t.Errorf("seed000's report shows the default estimator's cross-validation")
	}
}

func TestValidateCrossValidationStale(t *testing.T) {
	coef := estimate.DefaultCoefficients
	coef.ContextGiB += 0.5
	out := runValidate(t, writeCrossValCohort(t, coef))
	if !strings.Contains(out, "STALE") || !strings.Contains(out, "--cross-validation-output") {
		t.Errorf("stale cross-validation not flagged:\n%s", out)
	}
}

// The committed file describes the committed cohort: validate on
// evidence/dev.jsonl shows it.
func TestValidateDevShowsCommittedCrossValidation(t *testing.T) {
	out := runValidate(t, "../../evidence/dev.jsonl")
	if !strings.Contains(out, "generalisation (../../evidence/crossval.json)") || strings.Contains(out, "STALE") {
		t.Errorf("validate evidence/dev.jsonl does not show a current evidence/crossval.json first:\n%.2000s", out)
	}
}
