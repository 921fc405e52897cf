package plan

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
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
	_, cands, groups := candidates(base, o.Space, Layouts(o.Space, 64))
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

// TestSearchFastPathMatchesEstimate: on every candidate of several
// searches, the numbers-only fast path (a prepared request's evaluator)
// gives every field of the estimate the full Estimate gives for the
// candidate's request, errors included: a term the fast path drops or
// carries over from another candidate fails here.
func TestSearchFastPathMatchesEstimate(t *testing.T) {
	for _, c := range []struct {
		id             string
		gpuGiB         float64
		method         estimate.Method
		stack          estimate.StackName
		precision      estimate.Precision
		perNode, nodes int64
		effective      int64
		kernels        []estimate.Kernel
		compile        bool
	}{
		{"Qwen/Qwen2.5-7B", 24, estimate.Full, "", "", 4, 1, 16, nil, false},
		{"meta-llama/Llama-3.1-70B", 80, estimate.Full, "", estimate.BF16Mixed, 8, 2, 32, nil, false},
		{"Qwen/Qwen2.5-0.5B", 16, estimate.LoRA, estimate.StackLitGPT, estimate.BF16Mixed, 4, 1, 8, nil, false},
		{"Qwen/Qwen2.5-0.5B", 24, estimate.LoRA, estimate.StackTorchtune, "", 2, 2, 8, nil, false},
		// Fused kernels and torch.compile change the saved activations
		// and the loss chain per candidate (sequence, batch, loss kernel).
		{"meta-llama/Llama-3.1-8B", 24, estimate.Full, "", "", 4, 1, 16, []estimate.Kernel{estimate.KernelLigerRMSNorm, estimate.KernelLigerSwiGLU}, true},
		{"meta-llama/Llama-3.1-8B", 24, estimate.LoRA, "", "", 4, 1, 16, []estimate.Kernel{estimate.KernelFOAK}, false},
	} {
		t.Run(fmt.Sprintf("%s-%s-%s-%d-kernels", c.id, c.method, c.stack, len(c.kernels)), func(t *testing.T) {
			o := searchOptions(t, c.id, c.gpuGiB, c.perNode, c.nodes, c.effective)
			o.Request.Method, o.Request.Stack, o.Request.Precision = c.method, c.stack, c.precision
			o.Request.Kernels, o.Request.Compile = c.kernels, c.compile
			base, err := o.Request.Normalize()
			if err != nil {
				t.Fatal(err)
			}
			methods, cands, _ := candidates(base, o.Space, Layouts(o.Space, c.effective))
			var bases []estimate.Request
			for _, m := range methods {
				bases = append(bases, methodBase(base, m))
			}
			prep, err := estimate.Prepare(o.Estimator, bases...)
			if err != nil {
				t.Fatal(err)
			}
			ev := prep.NewEvaluator()
			var got estimate.Estimate
			fits := 0
			for i, cd := range cands {
				want, wantErr := o.Estimator.Estimate(apply(base, cd))
				gotErr := ev.Estimate(cd.variant(), &got)
				if (wantErr == nil) != (gotErr == nil) || wantErr != nil && wantErr.Error() != gotErr.Error() {
					t.Fatalf("candidate %d %+v: error %v, Estimate's %v", i, cd, gotErr, wantErr)
				}
				if wantErr != nil {
					continue
				}
				if want.Verdict.Fit == estimate.FitYes {
					fits++
				}
				if d := cmp.Diff(want, &got, cmpopts.IgnoreUnexported(estimate.Estimate{})); d != "" {
					t.Fatalf("candidate %d %+v differs (-Estimate +fast path):\n%s", i, cd, d)
				}
			}
			if fits == 0 || fits == len(cands) {
				t.Errorf("%d of %d candidates fit: the search should hold both", fits, len(cands))
			}
		})
	}
}

// TestRankIsStableSort: rank orders plans as a stable sort by Compare
// does, equal plans in their given order, for lists with many ties and
// every permutation cycle shape a sort makes.
func TestRankIsStableSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 2, 3, 17, 1000} {
		plans := make([]Plan, n)
		for i := range plans {
			plans[i] = Plan{ChangesResult: rng.IntN(2) == 0, GradAccum: int64(rng.IntN(3)), MicroBatch: int64(i),
				Time: Time{Known: rng.IntN(4) > 0, Total: float64(rng.IntN(5))}, Cost: float64(rng.IntN(2)),
				Estimate: &estimate.Estimate{Verdict: estimate.Verdict{Ratio: float64(rng.IntN(3)) / 4}}}
		}
		want := slices.Clone(plans)
		slices.SortStableFunc(want, Compare)
		got := rank(slices.Clone(plans))
		for i := range want {
			if got[i].MicroBatch != want[i].MicroBatch {
				t.Fatalf("n=%d: place %d holds plan %d, a stable sort puts plan %d there", n, i, got[i].MicroBatch, want[i].MicroBatch)
			}
		}
	}
}
