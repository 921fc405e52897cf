package estimate

import (
	"sync"

	"github.com/canifinetune/canifinetune/allocator"
)

// allocStep is the shape of one training step's shape-dependent memory at
// the longest batch, in bytes, as the allocator replay uses it: the shapes
// at coefficient 1, so that the replay does not depend on fitted
// coefficients (and a fit can reuse it).
type allocStep struct {
	Layers int64
	// Kept is what one layer keeps for the backward (its activations, or
	// under checkpointing its saved input).
	Kept int64
	// Recompute is one layer's activations rebuilt in the backward under
	// checkpointing (0 without).
	Recompute int64
	// Logits is the number of logits s·b·vocab at the longest batch (0
	// with a fused loss), and Chain the order in which the loss path
	// allocates and frees its logit-sized tensors (losschain.go).
	Logits  int64
	Chain   lossChain
	Longest int64 // the longest batch's length
	Batch   int64
	// Lengths is the sample-length distribution the batches are drawn from.
	Lengths LengthDist
}

// allocReplaySteps is how many batches the replay runs: enough for the
// cache to reach its steady state over the distribution.
const allocReplaySteps = 48

var allocCache sync.Map // allocStep → float64

// cachedFraction replays steps of batch shapes through the caching-allocator
// model and returns the reserved bytes no live tensor used at the reserved
// peak, as a fraction of the step's peak shape-dependent allocation: the
// share of the transient the allocator holds cached beyond it.
func cachedFraction(s allocStep) float64 {
	if v, ok := allocCache.Load(s); ok {
		return v.(float64)
	}
	f := replaySteps(s)
	allocCache.Store(s, f)
	return f
}

func replaySteps(s allocStep) float64 {
	if s.Layers <= 0 || s.Longest <= 0 || s.Kept+s.Logits+s.Recompute <= 0 {
		return 0
	}
	lengths := batchLengths(s)
	a := allocator.New(allocator.Config{})
	var peakAlloc int64
	must := func(h allocator.Handle, err error) allocator.Handle {
		if err != nil { // unlimited capacity: cannot happen
			panic(err)
		}
		return h
	}
	// A layer's saved tensors have different widths (attention inputs,
	// MLP intermediates): split its share four ways, unevenly.
	shares := [4]float64{0.1, 0.2, 0.3, 0.4}
	for _, L := range lengths {
		f := float64(L) / float64(s.Longest)
		kept := make([][4]allocator.Handle, s.Layers)
		for i := range kept {
			for j, sh := range shares {
				kept[i][j] = must(a.Malloc(int64(f * sh * float64(s.Kept))))
			}
		}
		if s.Logits > 0 {
			var chain [lossChainTensors]allocator.Handle
			for _, op := range s.Chain.Ops {
				switch {
				case op > 0:
					chain[op-1] = must(a.Malloc(int64(f * float64(s.Chain.Bytes[op-1]) * float64(s.Logits))))
					peakAlloc = max(peakAlloc, a.Stats().Allocated)
				case op < 0:
					_ = a.Free(chain[-op-1])
				}
			}
		}
		for i := s.Layers - 1; i >= 0; i-- {
			var re [4]allocator.Handle
			if s.Recompute > 0 {
				for j, sh := range shares {
					re[j] = must(a.Malloc(int64(f * sh * float64(s.Recompute))))
				}
			}
			g := must(a.Malloc(int64(f * shares[0] * float64(max(s.Kept, s.Recompute)))))
			peakAlloc = max(peakAlloc, a.Stats().Allocated)
			for j := range kept[i] {
				_ = a.Free(kept[i][j])
				if s.Recompute > 0 {
					_ = a.Free(re[j])
				}
			}
			_ = a.Free(g)
		}
	}
	st := a.Stats()
	peakAlloc = max(peakAlloc, st.PeakAllocated)
	if peakAlloc == 0 {
		return 0
	}
	return float64(st.PeakReserved-peakAlloc) / float64(peakAlloc)
}

// batchLengths are the padded lengths of the replayed batches: each batch
// is padded to the longest of its Batch samples, drawn in a fixed
// pseudo-random order; the longest batch comes last.
func batchLengths(s allocStep) []int64 {
	out := make([]int64, allocReplaySteps)
	// A fixed xorshift stream: the replay is deterministic.
	x := uint64(0x9E3779B97F4A7C15)
	next := func() float64 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return float64(x>>11) / (1 << 53)
	}
	for i := range out {
		var l int64
		for range max(1, s.Batch) {
			l = max(l, s.Lengths.quantileFine(next()))
		}
		out[i] = max(1, l)
	}
	out[len(out)-1] = s.Longest
	return out
}

// allocStepOf is the replay shape of a request's step.
func allocStepOf(t terms, r Request) allocStep {
	s := allocStep{Layers: int64(r.Model.NumLayers), Longest: r.SeqLen, Batch: max(1, r.Batch)}
	if ckptOn(r) && s.Layers > 0 {
		// CkptUnit counts 16-bit elements of every block's saved input; a
		// per-op policy keeps its outputs beside it and regenerates only
		// the rest of the block.
		op := t.OpSaved / float64(s.Layers)
		s.Kept = int64(2*t.CkptUnit/float64(s.Layers) + op)
		s.Recompute = int64(max(0, t.LayerUnit-op))
	} else {
		s.Kept = int64(t.LayerUnit)
	}
	if t.Loss == "full" {
		s.Logits = int64(t.LogitUnit)
		s.Chain, _ = lossChainOf(r)
	}
	return s
}

// dynamicCachedCoef is the multiple of the step's shape-dependent transient
// the allocator keeps cached when batch shapes change from step to step: the
// fitted coefficient, but never more than the allocator model holds when it
// replays batches drawn from the run's length distribution — or, when that
// is unknown, from lengths spread evenly up to the longest, a broader spread
// of shapes than real data has. So no fitted coefficient can push the
// reserved level past what the allocator would physically hold.
func dynamicCachedCoef(fitted float64, t terms, r Request) float64 {
	return min(fitted, dynamicCacheBound(t, r))
}

// dynamicCacheBound is the allocator model's cached fraction for the
// request's batch shapes (see dynamicCachedCoef).
func dynamicCacheBound(t terms, r Request) float64 {
	s := allocStepOf(t, r)
	if r.Lengths != nil {
		s.Lengths = *r.Lengths
	} else {
		s.Lengths = uniformLengths(1, r.SeqLen)
	}
	return cachedFraction(s)
}
