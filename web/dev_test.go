package web

import "testing"

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
