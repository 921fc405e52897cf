package plan

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/canifinetune/canifinetune/estimate"
)

// outcome is one candidate's numbers-only estimate.
type outcome struct {
	// e is the estimate of a candidate that fits (nil otherwise: the
	// search keeps only the ratio of the others, to find the nearest miss).
	e     *estimate.Estimate
	ratio float64
	// failed: the estimator refused the candidate; pruned: it was not
	// estimated because it cannot fit.
	failed, pruned bool
}

// arena hands out estimates from chunks, so that a worker allocates once
// per chunk rather than once per candidate; a slot is kept only for a
// candidate that fits, and reused otherwise.
type arena struct {
	chunk []estimate.Estimate
	used  int
}

// arenaChunk is the estimates a chunk holds (about 120 KiB).
const arenaChunk = 256

func (a *arena) slot() *estimate.Estimate {
	if a.used == len(a.chunk) {
		a.chunk, a.used = make([]estimate.Estimate, arenaChunk), 0
	}
	return &a.chunk[a.used]
}

func (a *arena) keep() { a.used++ }

// evaluate estimates the candidates, numbers only, on the fast path of a
// prepared request (estimate.Prepared: normalized once per method, no
// allocation per candidate), in parallel over the CPUs, and returns their outcomes in the candidates' order, so that what
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
func evaluate(est estimate.Estimator, base estimate.Request, methods []estimate.Method, cands []candidate, groups [][]int32) []outcome {
	outs := make([]outcome, len(cands))
	// The request is normalized once per method; a method whose base is
	// invalid has no prepared base, and its candidates fail.
	var bases []estimate.Request
	for _, m := range methods {
		if q := methodBase(base, m); q.Method == m {
			if _, err := q.Normalize(); err == nil {
				bases = append(bases, q)
			}
		}
	}
	prep, err := estimate.Prepare(est, bases...)
	if err != nil {
		for i := range outs {
			outs[i].failed = true
		}
		return outs
	}
	var next atomic.Int64
	work := func() {
		ev := prep.NewEvaluator()
		var mem arena
		for {
			g := next.Add(1) - 1
			if g >= int64(len(groups)) {
				return
			}
			missed := false
			for _, i := range groups[g] {
				c := &cands[i]
				if missed && c.accum > 1 {
					outs[i].pruned = true
					continue
				}
				e := mem.slot()
				if err := ev.Estimate(c.variant(), e); err != nil {
					outs[i].failed = true
					continue
				}
				outs[i].ratio = e.Verdict.Ratio
				if e.Verdict.Fit == estimate.FitYes {
					outs[i].e = e
					mem.keep()
				} else if c.accum > 1 && prune {
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
