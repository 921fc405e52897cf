package cli

import (
	"io"
	"testing"
)

// BenchmarkPlanCommand measures `plan` end to end (model from the catalog,
// search, ranking, the chosen plan's explained estimate, the table): a 70B
// over 8 GPUs must answer well under a second.
func BenchmarkPlanCommand(b *testing.B) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"70B-full-8xA100-80GB", []string{"plan", "meta-llama/Llama-3.1-70B", "--method", "full", "--gpus", "8xA100-80GB", "--dataset-tokens", "1e8"}},
		{"70B-lora-2x8xH100", []string{"plan", "meta-llama/Llama-3.1-70B", "--gpus", "8xH100", "--nodes", "2", "--dataset-tokens", "1e9"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			env := Env{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
			for b.Loop() {
				if code := Main(c.args, env); code != ExitOK {
					b.Fatalf("exit %d", code)
				}
			}
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)*1e3, "ms/plan")
		})
	}
}
