package hfconfig

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.json from the current parser")

// goldenModel is everything Parse exposes about a model, in a form that
// marshals deterministically: the exported fields, the derived counts, the
// LoRA scopes and per-scope adapter sums, and the layers with runs of
// identical consecutive layers collapsed (a 61-layer model reads as a few
// runs, and a layer that differs from its neighbours stands out).
type goldenModel struct {
	ModelType, Outer, Family string
	Generic                  bool

	Hidden, NumLayers, Heads, KVHeads, HeadDim, Intermediate, Vocab int64
	Experts, ExpertsPerToken                                        int64
	MLP                                                             MLPKind
	TiedEmbeddings                                                  bool
	SlidingWindow                                                   int64
	LogitSoftcap                                                    float64

	EmbeddingParams, PositionParams, LMHeadParams, FinalNormParams, FrozenTowerParams int64
	LinearParams, NormParams, TextParams, ConfigParams, ActiveFFN                     int64

	AttentionTargets, MLPTargets, AllLinearTargets []string
	// AdapterSum and AdapterInputs per scope keyword.
	AdapterSum, AdapterInputs map[string]int64
	// AdapterErrors holds a scope's error instead (a scope naming no module).
	AdapterErrors map[string]string `json:",omitempty"`

	PreQuantized *PreQuant
	Seq2Seq      *Seq2Seq `json:",omitempty"`
	Notes        []string
	Layers       []layerRun
}

// layerRun is Count identical layers starting at index First.
type layerRun struct {
	First, Count int
	Layer
}

func describe(m *Model) goldenModel {
	g := goldenModel{
		ModelType: m.ModelType, Outer: m.Outer, Family: m.Family, Generic: m.Generic,
		Hidden: m.Hidden, NumLayers: m.NumLayers, Heads: m.Heads, KVHeads: m.KVHeads, HeadDim: m.HeadDim,
		Intermediate: m.Intermediate, Vocab: m.Vocab, Experts: m.Experts, ExpertsPerToken: m.ExpertsPerToken,
		MLP: m.MLP, TiedEmbeddings: m.TiedEmbeddings, SlidingWindow: m.SlidingWindow, LogitSoftcap: m.LogitSoftcap,
		EmbeddingParams: m.EmbeddingParams, PositionParams: m.PositionParams, LMHeadParams: m.LMHeadParams,
		FinalNormParams: m.FinalNormParams, FrozenTowerParams: m.FrozenTowerParams,
		LinearParams: m.LinearParams(), NormParams: m.NormParams(), TextParams: m.TextParams(),
		ConfigParams: m.ConfigParams(), ActiveFFN: m.ActiveFFN(),
		AttentionTargets: m.AttentionTargets(), MLPTargets: slices.Clone(m.mlpNames), AllLinearTargets: m.AllLinearTargets(),
		AdapterSum: map[string]int64{}, AdapterInputs: map[string]int64{},
		PreQuantized: m.PreQuantized, Seq2Seq: m.Seq2Seq, Notes: m.Notes,
	}
	for _, scope := range []string{ScopeAttention, ScopeMLP, ScopeAllLinear} {
		s, err := m.AdapterSum([]string{scope})
		if err == nil {
			var in int64
			in, err = m.AdapterInputs([]string{scope})
			g.AdapterSum[scope], g.AdapterInputs[scope] = s, in
		}
		if err != nil {
			if g.AdapterErrors == nil {
				g.AdapterErrors = map[string]string{}
			}
			g.AdapterErrors[scope] = err.Error()
		}
	}
	for i, l := range m.Layers {
		if n := len(g.Layers); n > 0 && cmp.Equal(g.Layers[n-1].Layer, l) {
			g.Layers[n-1].Count++
			continue
		}
		g.Layers = append(g.Layers, layerRun{First: i, Count: 1, Layer: l})
	}
	return g
}

// TestGolden parses one real config.json per model_type (testdata/<model
// type>.json, provenance in testdata/SOURCES.md) and compares the full
// description with testdata/golden/<model type>.json. Run with -update to
// rewrite the golden files after an intended change, and read the diff.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		have[name] = true
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			m, err := Parse(b)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			// The file is named for the config's top-level model_type.
			top := m.Outer
			if top == "" {
				top = m.ModelType
			}
			if top != name {
				t.Errorf("top-level model_type %q, file named %q", top, name)
			}
			got, err := json.MarshalIndent(describe(m), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden := filepath.Join("testdata", "golden", name+".json")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -run TestGolden -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the parse (-want +got):\n%s", golden, cmp.Diff(string(want), string(got)))
			}
		})
	}
	// Every model_type with a builder has its own real config here, so a
	// new family cannot arrive untested and a builder cannot drift unseen.
	for _, mt := range SupportedTypes() {
		if !have[mt] {
			t.Errorf("model_type %q has a builder but no testdata/%s.json", mt, mt)
		}
	}
	if !slices.ContainsFunc(files, func(f string) bool {
		b, _ := os.ReadFile(f)
		m, err := Parse(b)
		return err == nil && m.Generic
	}) {
		t.Error("no testdata config exercises the generic Llama-style fallback")
	}
}
