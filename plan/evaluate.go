package plan

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/canifinetune/canifinetune/estimate"
)

// outcome is one candidate's numbers-only estimate.
type outcome struct {
	e *estimate.Estimate
	// failed: the estimator refused the candidate; pruned: it was not
	// estimated because it cannot fit.
	failed, pruned bool
}

// evaluate estimates the candidates, numbers only, in parallel over the
// CPUs, and returns their outcomes in the candidates' order, so that what
// the search makes of them does not depend on the scheduling.
//
// Candidates that differ only in their micro-batch form a group (see
// candidates), and a group is walked from the smallest micro-batch up. Memory grows with the
// micro-batch at a fixed number of accumulation steps above one (the
// activations and the loss chain grow with it; the accumulated gradients
// do not change), so once a micro-batch with accumulation does not fit,
// the larger ones with accumulation are pruned: they do not fit either.
// The one micro-batch without accumulation (the whole share of the batch)
// holds no accumulated gradients and is always estimated.
// TestSearchPruningKeepsResult holds this against the exhaustive search.
func evaluate(est estimate.Estimator, base estimate.Request, cands []candidate, groups [][]int32) []outcome {
	outs := make([]outcome, len(cands))
	var next atomic.Int64
	work := func() {
		for {
			g := next.Add(1) - 1
			if g >= int64(len(groups)) {
				return
			}
			missed := false
			for _, i := range groups[g] {
				c := cands[i]
				if missed && c.accum > 1 {
					outs[i].pruned = true
					continue
				}
				e, err := est.Estimate(apply(base, c))
				if err != nil {
					outs[i].failed = true
					continue
				}
				outs[i].e = e
				if e.Verdict.Fit != estimate.FitYes && c.accum > 1 && prune {
					missed = true
				}
			}
		}
	}
	n := min(runtime.GOMAXPROCS(0), len(groups))
	var wg sync.WaitGroup
	for range n - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
	return outs
}

// prune switches pruning off for the test that compares the pruned search
// with the exhaustive one.
var prune = true
