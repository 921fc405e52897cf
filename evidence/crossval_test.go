package evidence

import (
	"testing"
)

func TestFamily(t *testing.T) {
	for id, want := range map[string]string{"litgpt-rt-023": "litgpt-rt", "swift-001": "swift", "x": "x", "torchtune-flags-010": "torchtune-flags"} {
		if got := Family(id); got != want {
			t.Errorf("Family(%q) = %q, want %q", id, got, want)
		}
	}
}

// Each fold is fitted without its family: its fit has exactly the other
// families' rows, and its held-out rows are the family's scored rows.
func TestCrossValidateHoldsOut(t *testing.T) {
	if testing.Short() {
		t.Skip("fits once per family")
	}
	cases := readDev(t)
	full, err := Fit(cases, "dev.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	perFamily := map[string]int{}
	for _, id := range full.Rows {
		perFamily[Family(id)]++
	}
	cv, err := CrossValidate(cases, full)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range cv.Folds {
		if want := len(full.Rows) - perFamily[f.Family]; f.FittedRows != want {
			t.Errorf("fold %s fitted %d rows, want %d (all but its own %d)", f.Family, f.FittedRows, want, perFamily[f.Family])
		}
		if f.Summary.N != perFamily[f.Family] || f.InSample.N != f.Summary.N {
			t.Errorf("fold %s scored %d held-out and %d in-sample rows, want %d", f.Family, f.Summary.N, f.InSample.N, perFamily[f.Family])
		}
		if f.Coefficients == full.Coefficients {
			t.Errorf("fold %s has the full fit's coefficients", f.Family)
		}
		n += f.Summary.N
	}
	if n != len(full.Rows) || cv.HeldOut.N != n || len(cv.Cases) != n {
		t.Errorf("held out %d rows in folds, %d pooled, %d cases; the fit has %d", n, cv.HeldOut.N, len(cv.Cases), len(full.Rows))
	}
	// Out of sample is no better than in sample on the same rows.
	if cv.HeldOut.MAPE < cv.InSample.MAPE {
		t.Errorf("held-out MAPE %.2f below in-sample %.2f", cv.HeldOut.MAPE, cv.InSample.MAPE)
	}
	t.Logf("held out: MAPE %.1f%%, median %.1f%%, p90 %.1f%%; in sample %.1f / %.1f / %.1f",
		cv.HeldOut.MAPE, cv.HeldOut.MedianAbs, cv.HeldOut.P90Abs, cv.InSample.MAPE, cv.InSample.MedianAbs, cv.InSample.P90Abs)
}
