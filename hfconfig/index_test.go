package hfconfig

import (
	"os"
	"path/filepath"
	"testing"
)

// What index keeps for a parsed model equals what a pass over the layers
// gives now, for every config in testdata.
func TestIndexMatchesScan(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("testdata configs: %v, %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m, err := Parse(b)
		if err != nil {
			continue // configs kept to test refusals
		}
		fresh := *m
		fresh.indexed = false
		type sums struct{ lin, norm, ffn, narrow, largest, widest int64 }
		got := sums{m.LinearParams(), m.NormParams(), m.ActiveFFN(), m.NarrowestLinear(), m.LargestTensor(), m.WidestSide()}
		want := sums{fresh.LinearParams(), fresh.NormParams(), fresh.ActiveFFN(), fresh.NarrowestLinear(), fresh.LargestTensor(), fresh.WidestSide()}
		if got != want {
			t.Errorf("%s: indexed %+v, scanned %+v", f, got, want)
		}
	}
}
