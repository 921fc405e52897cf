package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestGoldenEstimateJSON pins the full --json output of estimate for a few
// configurations of every estimator: the schema and the numbers. Refresh with
// go test ./internal/cli -run TestGolden -update after an intended change.
func TestGoldenEstimateJSON(t *testing.T) {
	cases := []struct {
		name string
		args []string
	}{
		{"qwen25-7b-qlora-4090", []string{"estimate", "Qwen/Qwen2.5-7B", "--method", "qlora", "--seq-len", "2048", "--gpu", "rtx-4090", "--json"}},
		{"llama2-7b-lora-a100-seed000", []string{"estimate", "meta-llama/Llama-2-7b-hf", "--method", "lora", "--rank", "16", "--targets", "all-linear", "--gpu-vram-gb", "80", "--available-vram-gb", "70", "--estimator", "seed000", "--json"}},
		{"llama31-8b-full-zero3-unsloth", []string{"estimate", "meta-llama/Llama-3.1-8B", "--method", "full", "--precision", "bf16-mixed", "--grad-ckpt", "full", "--strategy", "zero3", "--num-gpus", "8", "--gpu", "h100", "--estimator", "unsloth", "--json"}},
		{"mixtral-qlora-nogpu", []string{"estimate", "mistralai/Mixtral-8x7B-v0.1", "--method", "qlora", "--targets", "all-linear", "--json"}},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			env := Env{Stdout: &out, Stderr: &errb, Getenv: func(k string) string {
				if k == "CANIFINETUNE_TOOL_PATH" {
					return t.TempDir() // no GPU tools: results do not depend on the host
				}
				return ""
			}}
			code := Main(tt.args, env)
			if code != ExitOK && code != ExitMarginal && code != ExitNoFit {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			path := filepath.Join("testdata", "golden", tt.name+".json")
			if *update {
				if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (create with -update)", err)
			}
			if d := cmp.Diff(string(want), out.String()); d != "" {
				t.Errorf("estimate %s --json differs from %s (-want +got):\n%s", strings.Join(tt.args[1:], " "), path, d)
			}
		})
	}
}
