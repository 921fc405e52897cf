package web

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/canifinetune/canifinetune/estimate"
)

// TestMeasuredErrorSlices: the cohort is scored for every estimator, and a
// request's slices hold only cases of its method (and, for the family
// slice, its model family).
func TestMeasuredErrorSlices(t *testing.T) {
	m, err := scoreCohort()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.cases) == 0 {
		t.Fatal("empty development cohort")
	}
	all := m.slices("canifinetune", "lora", "Qwen/Qwen2.5-7B")
	if len(all) == 0 || all[0].Label != "method lora" {
		t.Fatalf("slices %+v", all)
	}
	want := 0
	for i, r := range m.reports["canifinetune"].Cases {
		if m.cases[i].Method == "lora" && r.Status == "ok" {
			want++
		}
	}
	if all[0].Summary.N != want {
		t.Errorf("method lora: n %d, want %d", all[0].Summary.N, want)
	}
	if got := m.slices("no-such-estimator", "lora", "Qwen/Qwen2.5-7B"); got != nil {
		t.Errorf("unknown estimator: %+v", got)
	}
	if got := m.slices("canifinetune", "no-such-method", "Qwen/Qwen2.5-7B"); len(got) != 0 {
		t.Errorf("unknown method: %+v", got)
	}
}

// TestHeldOutErrorSlices: the page's held-out column is the
// leave-one-source-family-out check of the default estimator, cut to the
// request's slice: the method slices partition the pooled held-out rows,
// and the page shows the figures once they are computed.
func TestHeldOutErrorSlices(t *testing.T) {
	m, err := scoreCohort()
	if err != nil {
		t.Fatal(err)
	}
	if err := WaitHeldOut(); err != nil {
		t.Fatal(err)
	}
	cv, pending := heldOut.get(m.cases)
	if pending || cv == nil || cv.HeldOut.N == 0 {
		t.Fatalf("cross-validation: %v pending %v", cv, pending)
	}
	n := 0
	for _, method := range []string{"full", "lora", "qlora"} {
		sl := m.slices(estimate.Default, method, "Qwen/Qwen2.5-7B")
		if len(sl) == 0 || sl[0].HeldOut == nil {
			continue
		}
		if sl[0].HeldOutPending || sl[0].HeldOut.N > sl[0].Summary.N {
			t.Errorf("%s: held out %+v of in sample n %d", method, sl[0].HeldOut, sl[0].Summary.N)
		}
		n += sl[0].HeldOut.N
	}
	if n != cv.HeldOut.N {
		t.Errorf("the method slices hold %d held-out rows, the cross-validation %d", n, cv.HeldOut.N)
	}
	for _, name := range estimate.Names() {
		if sl := m.slices(name, "lora", "Qwen/Qwen2.5-7B"); name != estimate.Default && len(sl) > 0 && sl[0].HeldOut != nil {
			t.Errorf("estimator %s: a held-out column, which is the default estimator's: %+v", name, sl[0])
		}
	}
	lora := m.slices(estimate.Default, "lora", "Qwen/Qwen2.5-7B")[0].HeldOut
	r := do(t, "GET", "/?model=Qwen/Qwen2.5-7B&gpu=rtx-4090", nil, nil)
	if want := fmt.Sprintf(`<td class="num heldout">%d</td><td class="num heldout">%.1f %%</td>`, lora.N, lora.MAPE); !bytes.Contains(r.body, []byte(want)) {
		t.Errorf("the page lacks the held-out figures %s", want)
	}
}
