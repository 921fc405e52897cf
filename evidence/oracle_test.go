package evidence

import (
	"os"
	"testing"
)

// TestOracleGridKeptApart checks the committed oracle grid and the
// development cohort against each other: every oracle row is simulated (so
// calibrate's fit leaves it out), allocated-level and unique; no development
// row is simulated (so the README's accuracy table, computed on dev.jsonl,
// holds measurements only); and the grid has the size and families the
// oracle's README promises.
func TestOracleGridKeptApart(t *testing.T) {
	f, err := os.Open("oracle.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	grid, err := ReadCases(f, "oracle.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(grid) < minOracleCases {
		t.Errorf("oracle.jsonl has %d cases, want at least %d", len(grid), minOracleCases)
	}
	ids := map[string]bool{}
	types := map[string]int{}
	for _, c := range grid {
		if !c.Simulated || c.Measured.Kind != "allocated" || ids[c.ID] {
			t.Errorf("%s: simulated %v, measured.kind %q, duplicate %v; want simulated, allocated, unique", c.ID, c.Simulated, c.Measured.Kind, ids[c.ID])
		}
		ids[c.ID] = true
		if c.Arch != nil {
			types[*c.Arch]++
		}
	}
	for _, mt := range oracleFamilies {
		if types[mt] == 0 {
			t.Errorf("oracle.jsonl has no %s case", mt)
		}
	}
	for _, c := range readDev(t) {
		if c.Simulated {
			t.Errorf("dev.jsonl %s is simulated: the development cohort holds measurements only", c.ID)
		}
	}
}

// The grid oracle/grid.py plans (oracle/README.md): its size and its model types.
const minOracleCases = 1000

var oracleFamilies = []string{
	"llama", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "mistral", "phi", "phi3", "gpt_bigcode",
	"falcon", "gpt_neox", "gpt2", "olmo2", "stablelm", "granite",
	"granitemoe", "qwen2_moe", "deepseek_v2", "qwen3_moe", "mixtral",
}
