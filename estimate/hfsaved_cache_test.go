package estimate

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestAdapterTargetsCache: the cached per-name sums equal a fresh walk of
// the model's targets, for each target list, and the cache stays bounded.
func TestAdapterTargetsCache(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-0.5B")
	for _, spec := range [][]string{{"attention"}, {"all-linear"}, {"q_proj", "v_proj"}} {
		lins, err := m.Targets(spec)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string][2]int64{}
		var order []string
		for _, l := range lins {
			if _, ok := want[l.Name]; !ok {
				order = append(order, l.Name)
			}
			s := want[l.Name]
			want[l.Name] = [2]int64{s[0] + l.In*l.Copies, s[1] + l.Copies}
		}
		for range 2 { // computed, then cached
			sums, err := adapterTargets(m, spec)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][2]int64{}
			var gotOrder []string
			for _, s := range sums {
				got[s.name] = [2]int64{s.in, s.copies}
				gotOrder = append(gotOrder, s.name)
			}
			if d := cmp.Diff(want, got); d != "" || !cmp.Equal(order, gotOrder) {
				t.Errorf("%v: sums differ (-want +got):\n%s\norder %v, want %v", spec, d, gotOrder, order)
			}
		}
	}
	if _, err := adapterTargets(m, []string{"no_such_proj"}); err == nil {
		t.Error("an unknown target gave no error")
	}
	for range targetSumsMax + 10 {
		c := *m
		if _, err := adapterTargets(&c, []string{"attention"}); err != nil {
			t.Fatal(err)
		}
	}
	targetSums.Lock()
	n := len(targetSums.m)
	targetSums.Unlock()
	if n > targetSumsMax {
		t.Errorf("cache holds %d entries, want at most %d", n, targetSumsMax)
	}
}
