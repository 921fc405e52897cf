package cli

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/evidence"
	"github.com/google/go-cmp/cmp"
	"github.com/rogpeppe/go-internal/txtar"
)

// TestValidateJSONConsistent runs validate --json on the dev cohort with every
// registered estimator and checks that the document agrees with itself: each
// summary is what its cases say, nothing is dropped, and unknowns are absent.
// It pins no accuracy figure, so it holds whatever the estimators become.
func TestValidateJSONConsistent(t *testing.T) {
	names := estimate.Names()
	args := []string{"validate", "../../evidence/dev.jsonl", "--json"}
	if len(names) > 0 {
		args = append(args, "--compare", strings.Join(names, ","))
	}
	var out, errb bytes.Buffer
	if code := Main(args, Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var doc ValidateJSON
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	k := len(doc.Estimators)
	if k != 1+len(names) {
		t.Fatalf("%d estimator reports, want %d", k, 1+len(names))
	}
	if doc.Input.Selected != doc.Input.Cases || len(doc.Cases) != k*doc.Input.Selected {
		t.Fatalf("selected %d of %d, %d case entries; want all, and %d entries", doc.Input.Selected, doc.Input.Cases, len(doc.Cases), k*doc.Input.Cases)
	}
	supportedByAll := 0
	for i := 0; i < len(doc.Cases); i += k {
		all := true
		for _, c := range doc.Cases[i : i+k] {
			if c.ID != doc.Cases[i].ID {
				t.Fatalf("case entry %d is %s, want %s: entries go case by case", i, c.ID, doc.Cases[i].ID)
			}
			all = all && c.Status != evidence.StatusUnsupported
		}
		if all {
			supportedByAll++
		}
	}
	if doc.Comparison == nil || doc.Comparison.Rows != supportedByAll || doc.Comparison.Rows+doc.Comparison.Excluded != doc.Input.Selected {
		t.Errorf("comparison = %+v, want %d rows supported by all of %d", doc.Comparison, supportedByAll, doc.Input.Selected)
	}
	for ei, rep := range doc.Estimators {
		var abs []float64
		var ok, oom, unsup int
		reasons := map[string]int{}
		for i := ei; i < len(doc.Cases); i += k {
			c := doc.Cases[i]
			if c.Estimator != rep.Name {
				t.Fatalf("case %s: estimator %s, want %s", c.ID, c.Estimator, rep.Name)
			}
			switch c.Status {
			case evidence.StatusOK:
				ok++
				if c.MeasuredGiB == nil || c.EstimatedGiB == nil || c.ErrorPct == nil {
					t.Fatalf("%s/%s: ok without measured, estimated or error: %+v", rep.Name, c.ID, c)
				}
				want := (*c.EstimatedGiB - *c.MeasuredGiB) / *c.MeasuredGiB * 100
				if math.Abs(want-*c.ErrorPct) > 0.01 {
					t.Errorf("%s/%s: error_pct %v, want (%v − %v)/%v = %v", rep.Name, c.ID, *c.ErrorPct, *c.EstimatedGiB, *c.MeasuredGiB, *c.MeasuredGiB, want)
				}
				abs = append(abs, math.Abs(*c.ErrorPct))
			case evidence.StatusOOM:
				oom++
				if c.MeasuredGiB != nil || c.ErrorPct != nil || c.EstimatedGiB == nil {
					t.Errorf("%s/%s: an OOM case has an estimate and no measured peak or error: %+v", rep.Name, c.ID, c)
				}
			case evidence.StatusUnsupported:
				unsup++
				reasons[c.Unsupported]++
				if c.Unsupported == "" || c.EstimatedGiB != nil || c.ErrorPct != nil {
					t.Errorf("%s/%s: an unsupported case has a reason and no estimate: %+v", rep.Name, c.ID, c)
				}
			default:
				t.Errorf("%s/%s: status %q", rep.Name, c.ID, c.Status)
			}
		}
		s := rep.Summary
		if s.N != ok || s.OOM != oom || s.Unsupported != unsup || ok+oom+unsup != doc.Input.Selected {
			t.Errorf("%s summary n %d, oom %d, unsupported %d; cases say %d, %d, %d of %d", rep.Name, s.N, s.OOM, s.Unsupported, ok, oom, unsup, doc.Input.Selected)
		}
		if ok > 0 {
			var sum float64
			for _, a := range abs {
				sum += a
			}
			if s.MAPE == nil || math.Abs(*s.MAPE-sum/float64(ok)) > 0.01 {
				t.Errorf("%s MAPE %v, want %v from the cases", rep.Name, s.MAPE, sum/float64(ok))
			}
			if s.P90Abs == nil || math.Abs(*s.P90Abs-evidence.Quantile(abs, 0.9)) > 0.01 {
				t.Errorf("%s p90 %v, want %v from the cases", rep.Name, s.P90Abs, evidence.Quantile(abs, 0.9))
			}
		}
		got := map[string]int{}
		for _, rc := range rep.UnsupportedReasons {
			got[rc.Reason] = rc.Count
			if len(rc.IDs) != rc.Count {
				t.Errorf("%s reason %q: count %d, %d ids", rep.Name, rc.Reason, rc.Count, len(rc.IDs))
			}
		}
		if diff := cmp.Diff(reasons, got); diff != "" {
			t.Errorf("%s unsupported_reasons (-cases +report):\n%s", rep.Name, diff)
		}
		cl := rep.Classification
		if cl.Rows+cl.NoCardExcluded+cl.UnsupportedExcluded != doc.Input.Selected ||
			cl.PredictedYes+cl.PredictedNo+cl.MarginalExcluded+cl.UnknownExcluded != cl.Rows {
			t.Errorf("%s classification does not add up: %+v", rep.Name, cl)
		}
		n := 0
		for _, g := range rep.ByMethod {
			n += g.N + g.OOM + g.Unsupported
		}
		if n != doc.Input.Selected {
			t.Errorf("%s by_method covers %d cases, want %d", rep.Name, n, doc.Input.Selected)
		}
	}
}

func TestWrapWords(t *testing.T) {
	tests := []struct {
		words       []string
		first, rest string
		width       int
		want        string
	}{
		{[]string{"a", "bb", "cc"}, "> ", "  ", 7, "> a bb\n  cc\n"},
		{[]string{"toolongword", "x"}, "", "", 4, "toolongword\nx\n"},
		{nil, "1  ", "", 10, "1  \n"},
		// Runes, not bytes: "–" is one column.
		{[]string{"–––", "–"}, "", "", 5, "––– –\n"},
	}
	for _, tt := range tests {
		if got := wrapWords(tt.words, tt.first, tt.rest, tt.width); got != tt.want {
			t.Errorf("wrapWords(%q, %d) = %q, want %q", tt.words, tt.width, got, tt.want)
		}
	}
}

func TestTable(t *testing.T) {
	tb := table{align: "lr"}
	tb.add("id", "GiB", "note")
	tb.add("long-id", "1.5", "")
	tb.add()
	tb.add("x", "–", "n")
	var b strings.Builder
	if err := tb.write(&b, ""); err != nil {
		t.Fatal(err)
	}
	want := "id       GiB  note\n" +
		"long-id  1.5\n" +
		"\n" +
		"x          –  n\n"
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

// TestValidateCalibrationDomain checks that --calibration changes the
// estimates inside the calibration's domain and only there: a calibration
// that doubles the activation and loss-chain coefficients, for LoRA runs made
// with litgpt, scored next to the same estimator uncalibrated.
func TestValidateCalibrationDomain(t *testing.T) {
	ar, err := txtar.ParseFile("testdata/script/validate.txtar")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range ar.Files {
		if f.Name == "cases.jsonl" {
			if err := os.WriteFile(filepath.Join(dir, f.Name), f.Data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	coef := estimate.DefaultCoefficients
	coef.Logits *= 2
	coef.ActGated *= 2
	coef.ActClassic *= 2
	coef.CkptPerLayer *= 2
	cal := evidence.Calibration{SchemaVersion: 1, Estimator: "canifinetune", Cohort: "test", Coefficients: coef,
		Domain: evidence.Domain{ModelTypes: []string{"qwen2"}, Methods: []string{"lora"}, Stacks: []string{"litgpt"}, GPUMemGiB: [2]float64{20, 30}}}
	b, err := json.Marshal(cal)
	if err != nil {
		t.Fatal(err)
	}
	calPath := filepath.Join(dir, "cal.json")
	if err := os.WriteFile(calPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	args := []string{"validate", filepath.Join(dir, "cases.jsonl"), "--estimator", "canifinetune", "--calibration", calPath, "--compare", "canifinetune", "--json"}
	if code := Main(args, Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var doc ValidateJSON
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Calibration == nil || doc.Calibration.Applied != 2 || doc.Calibration.NotApplied != 2 {
		t.Fatalf("calibration = %+v, want applied 2 (q-lora, q-lora-ckpt), not applied 2", doc.Calibration)
	}
	inDomain := map[string]bool{"q-lora": true, "q-lora-ckpt": true}
	for i := 0; i+1 < len(doc.Cases); i += 2 {
		calib, plain := doc.Cases[i], doc.Cases[i+1]
		if !strings.HasSuffix(calib.EstimatorVersion, "+calibrated") || strings.HasSuffix(plain.EstimatorVersion, "+calibrated") {
			t.Fatalf("%s: versions %q, %q: want the calibrated one first", calib.ID, calib.EstimatorVersion, plain.EstimatorVersion)
		}
		if calib.EstimatedGiB == nil || plain.EstimatedGiB == nil {
			continue // unsupported by both
		}
		differ := *calib.EstimatedGiB != *plain.EstimatedGiB
		if differ != inDomain[calib.ID] {
			t.Errorf("%s: calibrated %v GiB, embedded %v GiB; in the domain: %v", calib.ID, *calib.EstimatedGiB, *plain.EstimatedGiB, inDomain[calib.ID])
		}
	}
}
