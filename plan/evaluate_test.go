package plan

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/canifinetune/canifinetune/estimate"
)

// TestSearchPruningKeepsResult: the search with pruned micro-batches,
// estimated in parallel, ranks the same plans, finds the same nearest miss
// and counts the same candidates as the exhaustive search, on requests
// where most candidates fit, where few do and where none does.
func TestSearchPruningKeepsResult(t *testing.T) {
	for _, c := range []struct {
		id             string
		gpuGiB         float64
		method         estimate.Method
		perNode, nodes int64
		effective      int64
	}{
		{"Qwen/Qwen2.5-7B", 24, estimate.Full, 4, 1, 16},
		{"Qwen/Qwen2.5-7B", 80, estimate.Full, 8, 1, 64},
		{"meta-llama/Llama-3.1-70B", 80, estimate.Full, 8, 2, 32},
		{"meta-llama/Llama-3.1-70B", 16, estimate.Full, 2, 1, 8}, // nothing fits
	} {
		t.Run(fmt.Sprintf("%s-%gGiB-%dx%d", c.id, c.gpuGiB, c.nodes, c.perNode), func(t *testing.T) {
			o := searchOptions(t, c.id, c.gpuGiB, c.perNode, c.nodes, c.effective)
			o.Request.Method = c.method
			fast, err := Search(o)
			if err != nil {
				t.Fatal(err)
			}
			prune = false
			defer func() { prune = true }()
			slow, err := Search(o)
			if err != nil {
				t.Fatal(err)
			}
			if slow.Pruned != 0 {
				t.Fatalf("exhaustive search pruned %d", slow.Pruned)
			}
			if c.gpuGiB < 80 && fast.Pruned == 0 {
				t.Errorf("nothing pruned of %d candidates", fast.Candidates)
			}
			fast.Pruned = 0
			if !reflect.DeepEqual(fast, slow) {
				t.Errorf("pruned search differs: %d fits of %d candidates (nearest %v), exhaustive %d of %d (nearest %v)",
					fast.Fits, fast.Candidates, fast.Nearest != nil, slow.Fits, slow.Candidates, slow.Nearest != nil)
			}
		})
	}
}

// TestSearchPlansMatchFullEstimate: a sample of the plans the numbers-only
// search ranks carry the numbers the full estimate (with its explanation)
// and the standalone time model give for the same request and layout.
func TestSearchPlansMatchFullEstimate(t *testing.T) {
	o := searchOptions(t, "Qwen/Qwen2.5-7B", 24, 4, 1, 16)
	o.Request.Method = estimate.Full
	res, err := Search(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Plans) < 50 {
		t.Fatalf("%d plans", len(res.Plans))
	}
	for i := 0; i < len(res.Plans); i += len(res.Plans) / 25 {
		p := res.Plans[i]
		e, err := o.Estimator.Estimate(p.Request)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := o.Estimator.Explain(p.Request, e); err != nil {
			t.Fatal(err)
		}
		if e.Total != p.Estimate.Total || e.Verdict != p.Estimate.Verdict || e.TrainableParams != p.Estimate.TrainableParams {
			t.Errorf("plan %d: search total %d verdict %+v, full estimate %d %+v", i, p.Estimate.Total, p.Estimate.Verdict, e.Total, e.Verdict)
		}
		tp, err := PredictThroughput(o.Hardware, p.Request, e.TrainableParams, Layout{World: p.World, Nodes: p.Nodes, MicroBatch: p.MicroBatch, GradAccum: p.GradAccum})
		if err != nil {
			t.Fatal(err)
		}
		if tp.Time.Step != p.Time.Step {
			t.Errorf("plan %d: search step %v s, time model %v s", i, p.Time.Step, tp.Time.Step)
		}
	}
}

// TestCandidateGroups: every candidate is in exactly one group, and a
// group's candidates differ only in micro-batch and accumulation, the
// micro-batch ascending.
func TestCandidateGroups(t *testing.T) {
	o := searchOptions(t, "Qwen/Qwen2.5-7B", 80, 8, 2, 64)
	o.Request.Method = estimate.Full
	base, err := o.Request.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	cands, groups := candidates(base, o.Space, Layouts(o.Space, 64))
	seen := make([]int, len(cands))
	for _, g := range groups {
		for j, i := range g {
			seen[i]++
			a, b := cands[g[0]], cands[i]
			a.micro, a.accum, b.micro, b.accum = 0, 0, 0, 0
			if a != b {
				t.Fatalf("group mixes %+v and %+v", cands[g[0]], cands[i])
			}
			if j > 0 && cands[i].micro <= cands[g[j-1]].micro {
				t.Fatalf("micro-batch %d after %d", cands[i].micro, cands[g[j-1]].micro)
			}
		}
	}
	for i, n := range seen {
		if n != 1 {
			t.Fatalf("candidate %d (%+v) in %d groups", i, cands[i], n)
		}
	}
}
