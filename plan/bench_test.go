package plan

import (
	"syscall"
	"testing"

	"github.com/canifinetune/canifinetune/estimate"
)

// BenchmarkSearch measures the search: every candidate configuration is
// estimated (numbers only) and timed. It reports the candidates of one
// search, the time per candidate and candidates per second; the goal is
// ≥ 10,000 candidates in ≤ 50 ms (≤ 5 µs per candidate).
func BenchmarkSearch(b *testing.B) {
	for _, c := range []struct {
		name, id string
		gpuGiB   float64
	}{
		// A full fine-tune request, so methods full, lora and qlora are all
		// searched: 3 methods × 3 lengths × 2 checkpointing × 2 loss kernels
		// × 2 optimizers × 157 layouts/shardings of 64 sequences over 1–8 GPUs.
		{"7B-8xA100-80GB", "Qwen/Qwen2.5-7B", 80},
		{"70B-8xA100-80GB", "meta-llama/Llama-3.1-70B", 80},
	} {
		o := searchOptions(b, c.id, c.gpuGiB, 8, 1, 64)
		o.Request.Method = estimate.Full
		b.Run(c.name, func(b *testing.B) {
			var n, pruned int
			cpu0 := cpuTime(b)
			for b.Loop() {
				res, err := Search(o)
				if err != nil {
					b.Fatal(err)
				}
				n, pruned = res.Candidates, res.Pruned
			}
			perSearch := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(float64(n), "candidates")
			// Decided without an estimate: a smaller micro-batch did not fit.
			b.ReportMetric(float64(pruned), "pruned")
			b.ReportMetric(perSearch/float64(n)*1e9, "ns/candidate")
			b.ReportMetric(float64(n)/perSearch, "candidates/s")
			// The CPU time this process spent, per candidate: on a shared,
			// loaded machine wall time per candidate is mostly waiting.
			b.ReportMetric((cpuTime(b)-cpu0)/float64(b.N)/float64(n)*1e9, "cpu-ns/candidate")
		})
	}
}

// cpuTime is the user and system CPU seconds this process has used.
func cpuTime(b *testing.B) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Skip("no rusage:", err)
	}
	sec := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return sec(ru.Utime) + sec(ru.Stime)
}
