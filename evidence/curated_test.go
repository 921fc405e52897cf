package evidence

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/estimate"
)

func readCasesFile(t *testing.T, name string) []Case {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cases, err := ReadCases(f, name)
	if err != nil {
		t.Fatal(err)
	}
	return cases
}

// TestCuratedCohort loads the curated rows and holds them to the rules of
// curated-SOURCES.md: ids unique and disjoint from the development cohort,
// every source family documented there, every row with a source and an
// original figure to check its conversion against.
func TestCuratedCohort(t *testing.T) {
	curated := readCasesFile(t, "curated.jsonl")
	if len(curated) == 0 {
		t.Fatal("curated.jsonl holds no cases")
	}
	devIDs := map[string]bool{}
	for _, c := range readCasesFile(t, "dev.jsonl") {
		devIDs[c.ID] = true
	}
	doc, err := os.ReadFile("curated-SOURCES.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range curated {
		if seen[c.ID] {
			t.Errorf("id %s used twice", c.ID)
		}
		seen[c.ID] = true
		if devIDs[c.ID] {
			t.Errorf("id %s is also a dev.jsonl id", c.ID)
		}
		fam := Family(c.ID)
		if fam == c.ID || fam == "" {
			t.Errorf("id %s has no numbered source-family prefix", c.ID)
		}
		if !strings.Contains(string(doc), "`"+fam+"`") {
			t.Errorf("source family %s (of %s) is not described in curated-SOURCES.md", fam, c.ID)
		}
		if strings.TrimSpace(c.Source) == "" || strings.TrimSpace(c.Measured.Original) == "" {
			t.Errorf("%s: source and measured.original must be filled", c.ID)
		}
		if c.Trust == "" {
			t.Errorf("%s: trust must be graded", c.ID)
		}
	}
	for fam := range familiesOf(readCasesFile(t, "dev.jsonl")) {
		for _, c := range curated {
			if Family(c.ID) == fam {
				t.Errorf("%s belongs to family %s, which dev.jsonl already uses", c.ID, fam)
			}
		}
	}
}

func familiesOf(cases []Case) map[string]bool {
	m := map[string]bool{}
	for _, c := range cases {
		m[Family(c.ID)] = true
	}
	return m
}

// The curated torchtitan rows from its benchmark documents (Llama 3 8B
// and Qwen3 8B, 2024-12 to 2026-08) are estimated on the torchtitan stack: its per-op selective
// checkpointing and its loss (compiled with the blocks, or chunked), which
// no development row uses and no coefficient was fitted to. Each is within
// 16 % of its measured reserved peak (−7.5 … +15.1 %; the widest, the B200
// run, measures 5 GiB less than the MI300X run of the same configuration,
// and moved from +14.3 % when the fitted cached share of the largest
// transient rose 0.34 → 0.42);
// read as no checkpointing and the stock loss they were +32 % to +102 %.
func TestTorchtitanRows(t *testing.T) {
	def, _ := estimate.ByName("")
	var rows []Case
	for _, c := range readCasesFile(t, "curated.jsonl") {
		// gh-titan's pull-request logs are scored in README's table with
		// the rest; their spread (−22 … +16 %) is wider than this bound.
		if c.Framework == "torchtitan" && Family(c.ID) != "gh-titan" {
			rows = append(rows, c)
		}
	}
	if len(rows) != 10 {
		t.Fatalf("%d torchtitan rows, want 10", len(rows))
	}
	for _, r := range Score(rows, def).Cases {
		if r.ErrorPct == nil {
			t.Errorf("%s: not estimated (%s)", r.ID, r.Status)
			continue
		}
		t.Logf("%s: %+.1f %%", r.ID, *r.ErrorPct)
		if e := *r.ErrorPct; e < -16 || e > 16 {
			t.Errorf("%s: error %+.1f %%, want within ±16 %%", r.ID, e)
		}
	}
}

// Pinned figures of the default estimator on the curated rows, which
// nothing is fitted to, as README.md's table gives them (`canifinetune
// validate evidence/curated.jsonl --compare reference,unsloth`). A change
// that makes them worse fails here; one that improves them lowers the pins
// and the table in the same commit. History: 29.7 / 16.1 / 60.6 % (MAPE,
// median, p90) before the pytorch preset read universal-llm-trainer's and
// rasbt's loops, which compute the loss on the 16-bit logits themselves,
// and universal-llm-trainer's LoRA rows were recorded bf16-true (no
// autocast): 22.7 / 9.5 / 40.5 %; with lightning-thunder's Lit-GPT example
// (7 rows) and FSDP SHARD_GRAD_OP's shard beside the gathered model:
// 21.8 / 8.8 / 40.5 % on 140 rows; with nine torchtitan pull-request logs
// and one axolotl OOM (a new cohort, not a change of the estimator):
// 21.1 / 9.1 / 39.9 % on 149 rows; with torchtune's April 2024 README
// table (four rows, a new cohort) and paged optimizer states outside the
// allocator: 21.0 / 9.3 / 39.6 % on 153 rows; with a lit-gpt tutorial's
// two Falcon-7B LoRA figures: 20.9 / 9.3 / 39.6 % on 155; with no
// autocast cache beside SHARD_GRAD_OP's 16-bit gathered units: 20.8 / 9.1 /
// 39.6 %; with the lit-gpt Falcon-7B rows read as SDPA's math kernel
// (its one key/value head unrepeated): 20.7 / 8.5 / 39.6 %; with the
// Unsloth notebook rows on the cleaned Alpaca set estimated over its
// measured length histogram (longest 1,584 tokens, not the 2,048 bound):
// 20.1 / 8.4 / 39.3 %; with the swift example scripts' rows estimated over
// the token statistics ms-swift publishes for their datasets (mean, std,
// range; longer samples deleted): 18.6 / 8.4 / 37.0 %; those statistics
// kept to the Qwen models whose tokenizer counted them (Llama 2 and
// Mistral count more tokens for the same text, and read with Qwen's counts
// were under-estimated by up to 19 %): 18.8 / 8.4 / 38.0 %; with QLoRA
// under autocast spelled out (swift-ex-007: +116.5 → +101.8 %): 18.7 /
// 8.4 / 38.0 %; refit with the development rows' swift news-dataset
// statistics kept to Qwen's tokenizer too: 18.72 / 8.35 / 36.64 %; refit
// with torchtune-flags-001 scored at a typical step (its active figure is
// one logged step's peak), which raises the fitted gated-MLP activation
// coefficient 0.72 → 0.85 and the cached share of the largest transient
// 0.34 → 0.42 (ult-gpu's median 5.5 → 7.4 %, unsloth-nb's 9.8 → 11.6 %):
// 18.94 / 9.21 / 36.14 %; the nine Unsloth notebook rows on the cleaned
// Alpaca set scored at the longest of the 480 samples their 60 steps drew
// (samples_seen; 699 tokens, read off the distribution's kept upper tail,
// not the set's longest, 1,584): 18.57 / 9.01 / 35.56 %; with a rank that
// offloads its parameters holding two whole gathered layers (ult-gpu's
// FSDP1 rows with CPU offload) and the refit: 18.48 / 8.88 / 33.42 %; with
// the allocator replay's batches drawn off the distributions' upper tail
// too (the swift example scripts' and the notebooks' reserved levels):
// 18.36 / 8.89 / 33.43 %; with a cut inside a distribution's top 1/32 (the
// swift example scripts' deleted samples) placed by the tail rather than
// by the coarse quantiles' line: 18.38 / 8.89 / 33.43 %.
func TestCuratedFiguresPinned(t *testing.T) {
	const pinMAPE, pinMedian, pinP90, slack = 18.38, 8.89, 33.43, 0.01
	def, _ := estimate.ByName("")
	s := Score(readCasesFile(t, "curated.jsonl"), def).Summary
	t.Logf("default on %d curated rows: MAPE %.3f%%, median |err| %.3f%%, p90 %.3f%%", s.N, s.MAPE, s.MedianAbs, s.P90Abs)
	if s.MAPE > pinMAPE+slack || s.MedianAbs > pinMedian+slack || s.P90Abs > pinP90+slack {
		t.Errorf("curated figures regressed: MAPE %.3f (pin %.2f), median %.3f (pin %.2f), p90 %.3f (pin %.2f)",
			s.MAPE, pinMAPE, s.MedianAbs, pinMedian, s.P90Abs, pinP90)
	}
	doc, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if row := fmt.Sprintf("| `canifinetune` (default) | %.1f %% | %.1f %% | %.1f %% |", pinMAPE, pinMedian, pinP90); !strings.Contains(string(doc), row) {
		t.Errorf("README.md's curated table does not hold the pinned figures: want a row starting %q", row)
	}
	// The reference estimators' rows beside it are what they score today
	// (their estimates move too when a case's lengths are read anew).
	for _, name := range []string{"reference", "unsloth"} {
		est, err := estimate.ByName(name)
		if err != nil {
			t.Fatal(err)
		}
		s := Score(readCasesFile(t, "curated.jsonl"), est).Summary
		if row := fmt.Sprintf("| `%s` | %.1f %% | %.1f %% | %.1f %% |", name, s.MAPE, s.MedianAbs, s.P90Abs); !strings.Contains(string(doc), row) {
			t.Errorf("README.md's curated table: want a row starting %q", row)
		}
	}
}

// Pinned figures of the default estimator on our own GPU receipts
// (evidence/device/*/cases.jsonl), as README.md's table gives them
// (`canifinetune validate evidence/device/h200-20261204/cases.jsonl
// --compare reference,unsloth`). History: 9.7 / 6.1 / 20.4 % (MAPE, median,
// p90; worst −41.0 %) as first measured, before SDPA's math kernel for fp32
// grouped heads and the for-loop AdamW were modelled: 4.7 / 4.3 / 6.9 %;
// with a tied embedding's two gradients at a full fine-tune's backward end:
// 4.3 / 3.8 / 6.3 %; refit with the swift news-dataset statistics kept to
// Qwen's tokenizer (the allocator terms move): 4.0 / 3.3 / 6.2 %; refit
// with torchtune-flags-001 scored at a typical step (the fitted cached
// share of the largest transient rises 0.34 → 0.42): 4.1 / 3.6 / 6.8 %;
// refit after two whole gathered layers under parameter offload (checkpoint
// bytes 3.29 → 3.21, the allocator constant 1.44 → 1.45 GiB): 4.2 / 3.7 /
// 7.0 %.
func TestDeviceFiguresPinned(t *testing.T) {
	const pinMAPE, pinMedian, pinP90, slack = 4.22, 3.71, 7.03, 0.01
	files, _ := filepath.Glob(filepath.Join("device", "*", "cases.jsonl"))
	if len(files) == 0 {
		t.Fatal("no evidence/device/*/cases.jsonl")
	}
	var cases []Case
	for _, f := range files {
		cases = append(cases, readCasesFile(t, f)...)
	}
	doc, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", "reference", "unsloth"} {
		est, err := estimate.ByName(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := Score(cases, est)
		s := sc.Summary
		label := "`" + name + "`"
		if name == "" {
			label = "`canifinetune` (default)"
			t.Logf("default on %d device rows: MAPE %.3f%%, median |err| %.3f%%, p90 %.3f%%", s.N, s.MAPE, s.MedianAbs, s.P90Abs)
			if s.MAPE > pinMAPE+slack || s.MedianAbs > pinMedian+slack || s.P90Abs > pinP90+slack {
				t.Errorf("device figures regressed: MAPE %.3f (pin %.2f), median %.3f (pin %.2f), p90 %.3f (pin %.2f)",
					s.MAPE, pinMAPE, s.MedianAbs, pinMedian, s.P90Abs, pinP90)
			}
		}
		if row := fmt.Sprintf("| %s | %.1f %% | %.1f %% | %.1f %% |", label, s.MAPE, s.MedianAbs, s.P90Abs); !strings.Contains(string(doc), row) {
			t.Errorf("README.md's device table: want a row starting %q", row)
		}
	}
}
