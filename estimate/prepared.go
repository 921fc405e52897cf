package estimate

import "fmt"

// Variant is what a search changes between the candidates of one prepared
// request: the base (by method, precision and quantized-weight storage,
// among the prepared bases), the shape of a step, the memory levers and
// the data-parallel spread. Every other field is the base's.
//
// Precision and QuantStorage select a base rather than vary on one: an
// engine may run a sharding in another precision or storage than asked
// (DeepSpeed trains "-true" as mixed precision, FSDP shards QLoRA's packed
// weights in bf16), and a search prepares a base for each such pair, so
// that every term that reads them is that base's own.
type Variant struct {
	Method                   Method
	Precision                Precision
	QuantStorage             Dtype
	SeqLen, Batch, GradAccum int64
	GradCkpt                 Checkpointing
	FusedCE                  LossKernel
	Optimizer                Optimizer
	Sharding                 Sharding
}

// Apply sets the variant's fields on r.
func (v Variant) Apply(r Request) Request {
	r.Method, r.Precision, r.QuantStorage = v.Method, v.Precision, v.QuantStorage
	r.SeqLen, r.Batch, r.GradAccum = v.SeqLen, v.Batch, v.GradAccum
	r.GradCkpt, r.FusedCE, r.Optimizer = v.GradCkpt, v.FusedCE, v.Optimizer
	r.Sharding = v.Sharding
	return r
}

// Prepared is a request normalized once, from which a search derives many
// candidates by changing only the fields of a Variant. Its Evaluators give,
// for each variant, exactly the numbers Estimate gives for
// v.Apply(base) — TestPreparedMatchesEstimate and the plan package's
// TestSearchFastPathMatchesEstimate compare them on every field — without
// normalizing the request again, without allocating, and for the default
// estimator without recomputing the model-derived terms a variant shares
// with an earlier one.
//
// A variant the fast path cannot vouch for (an unknown option value, a
// number out of range, a base with a length distribution and another
// sequence length) goes through Estimate, so an invalid variant gets
// Estimate's own error.
type Prepared struct {
	est Estimator
	// phasePeak is set when est is the default estimator, which has the
	// fast path; other estimators always go through Estimate.
	phasePeak *PhasePeak
	bases     []preparedBase
}

// preparedBase is one base: as given (what Estimate is called with) and
// normalized (what the fast path changes).
type preparedBase struct {
	given, norm Request
}

// Prepare normalizes each base request once. No two bases may have the
// same method, precision and quant storage once normalized (what a Variant
// selects a base by, spelled as Normalize spells them); the other fields a
// Variant sets are overwritten, so they need only be valid.
func Prepare(est Estimator, bases ...Request) (*Prepared, error) {
	p := &Prepared{est: est}
	if pp, ok := est.(PhasePeak); ok {
		p.phasePeak = &pp
	}
	for _, b := range bases {
		n, err := b.Normalize()
		if err != nil {
			return nil, err
		}
		for _, o := range p.bases {
			if o.norm.Method == n.Method && o.norm.Precision == n.Precision && o.norm.QuantStorage == n.QuantStorage {
				return nil, fmt.Errorf("%w: two prepared bases of method %s in %s with 4-bit storage %s", ErrInvalidRequest, n.Method, n.Precision, n.QuantStorage)
			}
		}
		p.bases = append(p.bases, preparedBase{given: b, norm: n})
	}
	return p, nil
}

// base is the prepared base a variant selects (nil: none).
func (p *Prepared) base(v *Variant) *preparedBase {
	for i := range p.bases {
		if n := &p.bases[i].norm; n.Method == v.Method && n.Precision == v.Precision && n.QuantStorage == v.QuantStorage {
			return &p.bases[i]
		}
	}
	return nil
}

// noBase is the error for a variant that selects no prepared base.
func noBase(v *Variant) error {
	return fmt.Errorf("%w: no prepared base of method %q in precision %q with 4-bit storage %q", ErrInvalidRequest, v.Method, v.Precision, v.QuantStorage)
}

// Request is the request a variant stands for: the method's base as given,
// with the variant's fields. Estimate(p.Request(v)) is what an Evaluator
// computes for v.
func (p *Prepared) Request(v Variant) (Request, error) {
	b := p.base(&v)
	if b == nil {
		return Request{}, noBase(&v)
	}
	return v.Apply(b.given), nil
}

// Evaluator estimates the variants of a Prepared. It keeps a cache of the
// terms it has computed, so it is not safe for concurrent use: a parallel
// search makes one per goroutine.
type Evaluator struct {
	p *Prepared
	// terms caches the terms per lever setting, then per batch shape; a
	// search walks many candidates of one lever setting in a row, so the
	// last one's table is kept at hand (its string key is not hashed again).
	terms     map[leverKey]map[shapeKey]terms
	last      leverKey
	lastTerms map[shapeKey]terms
	// shardings caches whether a strategy and offload pair passes
	// Normalize's checks (option tables and checkOffload).
	shardings map[shardingKey]bool
}

// leverKey and shapeKey are every field normalizedTerms reads that a
// variant changes (the base stands for its method, precision and storage). Of the sharding it reads only what residualBytes,
// wholeUnitGrads and hfAutocastSharding ask; a term that starts reading more of the sharding (or
// the accumulation) must add it here, or the fast path's comparison with
// Estimate fails.
type leverKey struct {
	base *preparedBase
	seq  int64
	ckpt Checkpointing
	ce   LossKernel
	opt  Optimizer
}

type shapeKey struct {
	batch       int64
	fsdpFamily  bool
	wholeUnit   bool
	multiDevice bool
	// autocastEach: every GPU runs torch.autocast over its own modules
	// (one GPU or DDP), which the spelled-out transformers terms of a
	// mixed-precision request need (hfAutocastSharding).
	autocastEach bool
	// deepspeed: a DeepSpeed run (deepspeedModule rewrites a -mixed base
	// to its 16-bit module); dsMaster and dsBF16: what its optimizer keeps
	// (dsMasterCopy, dsBF16Stage0), which the strategy's stage decides.
	deepspeed, dsMaster, dsBF16 bool
}

type shardingKey struct {
	strategy Strategy
	offload  Offload
}

// NewEvaluator makes an evaluator of the prepared bases' variants.
func (p *Prepared) NewEvaluator() *Evaluator {
	return &Evaluator{p: p, terms: map[leverKey]map[shapeKey]terms{}, shardings: map[shardingKey]bool{}}
}

// Estimate writes the estimate of variant v into e (which it resets) and
// returns Estimate's error for the request v stands for.
func (ev *Evaluator) Estimate(v Variant, e *Estimate) error {
	b := ev.p.base(&v)
	if b == nil {
		return noBase(&v)
	}
	if ev.p.phasePeak == nil || !ev.fast(b, v) {
		return ev.full(b, v, e)
	}
	r := asRun(v.Apply(b.norm))
	lk := leverKey{base: b, seq: v.SeqLen, ckpt: v.GradCkpt, ce: v.FusedCE, opt: v.Optimizer}
	if ev.lastTerms == nil || lk != ev.last {
		tab, ok := ev.terms[lk]
		if !ok {
			// The levers' values are checked once, before their first
			// terms: a table exists only for values Normalize keeps as
			// they are.
			if !canonicalIn(v.GradCkpt, ParseCheckpointing) || !canonicalIn(v.FusedCE, ParseLossKernel) || !canonicalIn(v.Optimizer, ParseOptimizer) {
				return ev.full(b, v, e)
			}
			tab = map[shapeKey]terms{}
			ev.terms[lk] = tab
		}
		ev.last, ev.lastTerms = lk, tab
	}
	sk := shapeKey{batch: v.Batch, fsdpFamily: r.Sharding.Strategy.Spec().Family == FamilyFSDP, deepspeed: deepspeedZeRO(r), dsMaster: dsMasterCopy(r), dsBF16: dsBF16Stage0(r),
		wholeUnit: wholeUnitGrads(r), multiDevice: r.Sharding.GPUs > 1, autocastEach: hfAutocastSharding(r)}
	t, ok := ev.lastTerms[sk]
	if !ok {
		t = ev.p.phasePeak.normalizedTerms(r)
		ev.lastTerms[sk] = t
	}
	return ev.p.phasePeak.combine(t, r, e)
}

// full is the slow path: Estimate of the request v stands for, copied into e.
func (ev *Evaluator) full(b *preparedBase, v Variant, e *Estimate) error {
	est, err := ev.p.est.Estimate(v.Apply(b.given))
	if err != nil {
		return err
	}
	*e = *est
	e.Components = append(e.buf[:0], est.Components...)
	return nil
}

// fast reports whether v applied to the normalized base b is what
// Normalize makes of v applied to the base as given: every number v sets
// is in range, its sharding passes Normalize's checks, and nothing
// Normalize derives from the base depends on v. (The levers' option
// values are checked in Estimate, once per terms entry.)
func (ev *Evaluator) fast(b *preparedBase, v Variant) bool {
	if b.norm.Lengths != nil && v.SeqLen != b.norm.SeqLen {
		return false // Normalize truncates the distribution at the length
	}
	if b.norm.OptimizerInBackward && (v.GradAccum > 1 || v.Sharding.Strategy.Spec().Family == FamilyDeepSpeed) {
		return false // checkKernels refuses accumulation and DeepSpeed with it
	}
	if b.norm.Model.Seq2Seq != nil {
		return false // checkSeq2Seq reads the variant's loss kernel and batch
	}
	switch {
	case v.SeqLen < 1 || v.SeqLen > MaxSeqLen, v.Batch < 1 || v.Batch > MaxBatch,
		v.SeqLen*v.Batch > MaxTokens, v.GradAccum < 0 || v.GradAccum > MaxGradAccum,
		v.Sharding.GPUs < 1 || v.Sharding.GPUs > MaxGPUs:
		return false
	}
	sk := shardingKey{v.Sharding.Strategy, v.Sharding.CPUOffload}
	ok, seen := ev.shardings[sk]
	if !seen {
		ok = canonicalIn(v.Sharding.Strategy, ParseStrategy) && canonicalIn(v.Sharding.CPUOffload, ParseOffload) &&
			checkOffload(v.Sharding) == nil
		ev.shardings[sk] = ok
	}
	return ok
}

// canonicalIn reports whether v is its option's canonical spelling.
func canonicalIn[T ~string](v T, parse func(string) (T, error)) bool {
	c, err := parse(string(v))
	return err == nil && c == v
}
