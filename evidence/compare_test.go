package evidence

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func ok(id, method string, errPct float64) CaseResult {
	m, e := 10.0, 10*(1+errPct/100)
	return CaseResult{ID: id, Method: method, Framework: "litgpt", Trust: "high", Status: StatusOK,
		MeasuredGiB: &m, EstimatedGiB: &e, ErrorPct: &errPct, Verdict: "yes"}
}

func unsupported(id, method, why string) CaseResult {
	return CaseResult{ID: id, Method: method, Framework: "litgpt", Trust: "high", Status: StatusUnsupported, Unsupported: why}
}

func TestFilterSelect(t *testing.T) {
	cases := []Case{
		{ID: "a", Trust: "high", Method: "lora"},
		{ID: "b", Trust: "medium", Method: "full"},
		{ID: "c", Trust: "low", Method: "lora"},
		{ID: "d", Trust: "", Method: "qlora"},
		{ID: "e", Trust: "medium", Method: "lora"},
	}
	ids := func(cs []Case) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.ID)
		}
		return out
	}
	tests := []struct {
		name string
		f    Filter
		want []string
	}{
		{"no filter keeps all", Filter{}, []string{"a", "b", "c", "d", "e"}},
		{"trust", Filter{Trust: []string{"high", "medium"}}, []string{"a", "b", "e"}},
		{"method", Filter{Method: []string{"lora"}}, []string{"a", "c", "e"}},
		{"both must hold", Filter{Trust: []string{"medium"}, Method: []string{"lora", "qlora"}}, []string{"e"}},
		{"none", Filter{Trust: []string{"low"}, Method: []string{"full"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, ids(tt.f.Select(cases))); diff != "" {
				t.Errorf("Select (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUnsupportedReasons(t *testing.T) {
	rs := []CaseResult{
		unsupported("1", "lora", "a"),
		unsupported("2", "lora", "b"),
		ok("3", "lora", 5),
		unsupported("4", "lora", "a"),
		{ID: "5", Status: StatusOOM},
		unsupported("6", "lora", "c"),
		unsupported("7", "lora", "b"),
		unsupported("8", "lora", "b"),
		unsupported("9", "lora", "0 first among equals"),
	}
	// Most frequent first; ties (c and "0 first…", one each) by reason.
	want := []ReasonCount{
		{Reason: "b", Count: 3, IDs: []string{"2", "7", "8"}},
		{Reason: "a", Count: 2, IDs: []string{"1", "4"}},
		{Reason: "0 first among equals", Count: 1, IDs: []string{"9"}},
		{Reason: "c", Count: 1, IDs: []string{"6"}},
	}
	if diff := cmp.Diff(want, UnsupportedReasons(rs)); diff != "" {
		t.Errorf("UnsupportedReasons (-want +got):\n%s", diff)
	}
	if got := UnsupportedReasons([]CaseResult{ok("x", "lora", 1)}); got != nil {
		t.Errorf("no unsupported rows: got %v, want nil", got)
	}
}

func TestAggregate(t *testing.T) {
	gib := 24.0
	cases := []Case{
		{ID: "a", GPU: GPU{VRAMGiB: &gib}},
		{ID: "b", GPU: GPU{VRAMGiB: &gib}},
		{ID: "c"}, // no card: out of the classification
		{ID: "d", GPU: GPU{VRAMGiB: &gib}, Measured: Measured{OOM: true}},
		{ID: "e", GPU: GPU{VRAMGiB: &gib}},
	}
	rs := []CaseResult{
		ok("a", "lora", 10),
		ok("b", "lora", -20),
		ok("c", "full", 30),
		{ID: "d", Method: "full", Trust: "high", Framework: "litgpt", Status: StatusOOM, Verdict: "yes"},
		unsupported("e", "full", "why"),
	}
	rs[1].Verdict = "no"
	rep := Aggregate("x", "1", cases, rs)
	// |errors| 10, 20, 30: mean 20; type-7 p90 at position 0.9×2 = 1.8,
	// 20 + 0.8 × (30 − 20) = 28; signed −20, 10, 30: median 10.
	worst := -20.0
	want := Summary{N: 3, MAPE: 20, MedianAbs: 20, MedianSigned: 10, P90Abs: 28, WorstUnder: &worst, WorstUnderID: "b", Unsupported: 1, OOM: 1}
	if diff := cmp.Diff(want, rep.Summary); diff != "" {
		t.Errorf("Summary (-want +got):\n%s", diff)
	}
	if got := rep.ByMethod["full"]; got.N != 1 || got.MAPE != 30 || got.OOM != 1 || got.Unsupported != 1 {
		t.Errorf("ByMethod[full] = %+v, want n 1, MAPE 30, 1 OOM, 1 unsupported", got)
	}
	// Rows a, b, d have a card and an estimate: a yes that fit, b a no that
	// fit (a false alarm), d a yes that OOMed.
	wantCl := Classification{Rows: 3, PredictedYes: 2, PredictedYesOOM: 1, PredictedNo: 1, PredictedNoOK: 1}
	if diff := cmp.Diff(wantCl, rep.Classification); diff != "" {
		t.Errorf("Classification (-want +got):\n%s", diff)
	}
}

func TestSameObservations(t *testing.T) {
	cases := []Case{{ID: "1"}, {ID: "2"}, {ID: "3"}, {ID: "4"}}
	a := Report{Estimator: "a", Cases: []CaseResult{
		ok("1", "lora", 10), unsupported("2", "lora", "a refuses"), ok("3", "lora", -40), ok("4", "lora", 20)}}
	b := Report{Estimator: "b", Cases: []CaseResult{
		ok("1", "lora", -5), ok("2", "lora", 1), unsupported("3", "lora", "b refuses"), ok("4", "lora", 15)}}
	kept, reps, err := SameObservations(cases, []Report{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Case{{ID: "1"}, {ID: "4"}}, kept); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
	// On cases 1 and 4 only: a's |errors| 10, 20 (MAPE 15, no
	// under-estimate left: −40 was on case 3); b's 5, 15 (MAPE 10, worst −5).
	if s := reps[0].Summary; s.N != 2 || s.MAPE != 15 || s.Unsupported != 0 || s.WorstUnder == nil || *s.WorstUnder != 10 {
		t.Errorf("a restricted = %+v, want n 2, MAPE 15, min signed +10", s)
	}
	if s := reps[1].Summary; s.N != 2 || s.MAPE != 10 || s.WorstUnderID != "1" {
		t.Errorf("b restricted = %+v, want n 2, MAPE 10, worst under on case 1", s)
	}
	if reps[0].Estimator != "a" || reps[1].Estimator != "b" {
		t.Errorf("order: got %s, %s, want a, b", reps[0].Estimator, reps[1].Estimator)
	}
	// The inputs are left alone: a still has its unsupported row.
	if a.Cases[1].Status != StatusUnsupported || len(a.Cases) != 4 {
		t.Errorf("SameObservations changed its input: %+v", a.Cases)
	}

	// An estimator compared with itself keeps exactly its supported rows.
	kept, reps, err = SameObservations(cases, []Report{a, a})
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != 3 {
		t.Errorf("a vs a: kept %d cases, want 3", len(kept))
	}
	if diff := cmp.Diff(reps[0].Summary, reps[1].Summary); diff != "" || reps[0].Summary.N != 3 {
		t.Errorf("a vs a: n %d, summaries differ (-first +second):\n%s", reps[0].Summary.N, diff)
	}
}

func TestSameObservationsMismatch(t *testing.T) {
	cases := []Case{{ID: "1"}, {ID: "2"}}
	short := Report{Estimator: "a", Cases: []CaseResult{ok("1", "lora", 1)}}
	if _, _, err := SameObservations(cases, []Report{short}); err == nil {
		t.Error("a report with fewer cases: got no error")
	}
	swapped := Report{Estimator: "a", Cases: []CaseResult{ok("2", "lora", 1), ok("1", "lora", 1)}}
	if _, _, err := SameObservations(cases, []Report{swapped}); err == nil {
		t.Error("a report in another order: got no error")
	}
}
