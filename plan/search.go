package plan

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/canifinetune/canifinetune/estimate"
)

// Goal is what the run must do.
type Goal struct {
	// DatasetTokens is one epoch's tokens; Epochs how many passes.
	DatasetTokens, Epochs float64
	// EffectiveBatch is the sequences per optimizer update over all GPUs:
	// micro-batch × gradient accumulation × data-parallel GPUs. Every plan
	// keeps it, so that the plans train with the same update size.
	EffectiveBatch int64
	// PricePerGPUHour prices a plan (0: no cost).
	PricePerGPUHour float64
}

// Tokens is the tokens the run trains on in all.
func (g Goal) Tokens() float64 { return g.DatasetTokens * max(g.Epochs, 0) }

// Space is what the search may change. The request's own values are always
// among the candidates.
type Space struct {
	// GPUsPerNode and Nodes bound the data-parallel layouts: 1..GPUsPerNode
	// GPUs on one node, or whole nodes of GPUsPerNode each up to Nodes.
	GPUsPerNode, Nodes int64
	// Methods are the methods tried (nil: the request's and those that hold
	// less: full → lora, qlora; lora → qlora).
	Methods []estimate.Method
	// ShorterSeqs tries half and a quarter of the requested sequence length
	// (at least 256 tokens), which changes the result.
	ShorterSeqs bool
}

// Plan is one configuration that fits, with its time.
type Plan struct {
	// Request is the candidate, normalized; Estimate its numbers-only
	// estimate (Terse: no sources or assumptions).
	Request  estimate.Request
	Estimate *estimate.Estimate
	// Nodes × GPUsPerNode = World data-parallel GPUs; MicroBatch ×
	// GradAccum × World = the goal's effective batch.
	Nodes, GPUsPerNode, World int64
	MicroBatch, GradAccum     int64
	Time                      Time
	// Cost is the run's price (0 without a price).
	Cost float64
	// ChangesResult: the plan trains another model than the request (a
	// different method or a shorter context).
	ChangesResult bool
	// Refused says why no supported stack runs the plan as estimated (from
	// Options.Refuse; "" when one does). Such plans rank after the others.
	Refused string
}

// Result is a search's answer.
type Result struct {
	// Plans fit (verdict yes), ranked by Compare.
	Plans []Plan
	// Candidates is the configurations decided; Fits how many fit.
	// Pruned of the candidates were not estimated: a smaller micro-batch
	// with the same levers did not fit, so they cannot (see evaluate).
	Candidates, Fits, Pruned int
	// Nearest is the candidate with the lowest ratio when none fits.
	Nearest *Plan
	// Binding says which constraint no plan meets, when none fits.
	Binding string
	// Base is the request as given, normalized: what Trades compares with.
	Base estimate.Request
}

// Trades says what a plan gives up against the request as given. It is
// built only for the plans shown, not in the search.
func (r *Result) Trades(p Plan) []string {
	t := trades(r.Base, p.Request, p.Time)
	if p.Refused != "" {
		t = append(t, "no supported stack runs it as estimated: "+p.Refused)
	}
	return t
}

// changesResult reports whether a candidate trains another model than the
// request: a different method or a shorter context.
func changesResult(base, q estimate.Request) bool {
	return q.Method != base.Method || q.SeqLen < base.SeqLen
}

// Options are a search's inputs.
type Options struct {
	Estimator estimate.Estimator
	// Request is the run as the user gave it (before Normalize), with the
	// GPU budget (GPUTotal, Available, Card) of one GPU.
	Request  estimate.Request
	Goal     Goal
	Space    Space
	Hardware Hardware
	// Refuse says why no supported stack runs a plan as estimated ("" when
	// one does), e.g. a setting the user asked for that the launchers
	// cannot reproduce; nil refuses none. The search's own levers already
	// follow the engines' rules (runs.go).
	Refuse func(Plan) string
}

// candidate is the lever settings of one configuration.
type candidate struct {
	method   estimate.Method
	seq      int64
	ckpt     estimate.Checkpointing
	ce       estimate.LossKernel
	opt      estimate.Optimizer
	strategy estimate.Strategy
	offload  estimate.Offload
	// prec and qstore are the precision and 4-bit storage the strategy's
	// engine runs the method's base in (runAs).
	prec   estimate.Precision
	qstore estimate.Dtype
	world  int64
	nodes  int64
	micro  int64
	accum  int64
}

// Search estimates every combination of the levers, keeps those that fit
// and ranks them. It fails only when the request itself is invalid.
func Search(o Options) (*Result, error) {
	base, err := o.Request.Normalize()
	if err != nil {
		return nil, err
	}
	if o.Goal.EffectiveBatch < 1 {
		return nil, fmt.Errorf("%w: effective batch must be at least 1, got %d", estimate.ErrInvalidRequest, o.Goal.EffectiveBatch)
	}
	shape := ShapeOf(base.Model)
	widths := map[estimate.Method]float64{}
	res := &Result{Base: base}
	var nearest *Plan
	layouts := Layouts(o.Space, o.Goal.EffectiveBatch)
	if len(layouts) == 0 {
		res.Binding = fmt.Sprintf("the effective batch of %d sequences cannot be split evenly over 1..%d GPUs", o.Goal.EffectiveBatch, max(o.Space.GPUsPerNode, 1)*max(o.Space.Nodes, 1))
		return res, nil
	}
	methods, cands, groups := candidates(base, o.Space, layouts)
	outs := evaluate(o.Estimator, base, cands, groups)
	params := base.Model.Params()
	// A method's base request and adapter width are made once (not per
	// plan: methodBase allocates the targets of a full fine-tune turned
	// into adapters); a method without a width has no plans (its
	// candidates are decided, but neither kept nor nearest).
	mbases := make(map[estimate.Method]estimate.Request, len(methods))
	noWidth := map[estimate.Method]bool{}
	for _, m := range methods {
		q := methodBase(base, m)
		mbases[m] = q
		if m == estimate.Full {
			continue
		}
		if w, err := AdapterWidth(q.Model, q.LoRATargets); err == nil {
			widths[m] = w
		} else {
			noWidth[m] = true
		}
	}
	fits, nearestAt := 0, -1
	for i, out := range outs {
		switch {
		case out.failed:
			continue
		case out.pruned:
			res.Pruned++
		case out.e != nil:
			fits++
		case noWidth[cands[i].method]:
		case nearestAt < 0 || out.ratio < outs[nearestAt].ratio:
			// The first candidate with the lowest ratio of those that do
			// not fit, for the report when none fits.
			nearestAt = i
		}
		res.Candidates++
	}
	plan := func(c candidate, e *estimate.Estimate) (Plan, bool) {
		if noWidth[c.method] {
			return Plan{}, false
		}
		q := c.variant().Apply(mbases[c.method])
		w := widths[q.Method]
		p := Plan{Request: q, Estimate: e, Nodes: c.nodes, GPUsPerNode: c.world / c.nodes, World: c.world, MicroBatch: c.micro, GradAccum: c.accum}
		if c.nodes == 1 {
			p.GPUsPerNode = c.world
		}
		lay := layout{world: c.world, perNode: p.GPUsPerNode, nodes: c.nodes, micro: c.micro, accum: c.accum}
		p.Time = StepTime(o.Hardware, q, e, TokenFLOPs(shape, q, w), params, lay)
		p.Time.finish(o.Goal, q)
		if p.Time.Known && o.Goal.PricePerGPUHour > 0 {
			p.Cost = p.Time.Total / 3600 * o.Goal.PricePerGPUHour * float64(c.world)
		}
		p.ChangesResult = changesResult(base, q)
		return p, true
	}
	all := make([]Plan, 0, fits)
	for i, c := range cands {
		if outs[i].e == nil {
			continue
		}
		if p, ok := plan(c, outs[i].e); ok {
			if o.Refuse != nil {
				p.Refused = o.Refuse(p)
			}
			all = append(all, p)
		}
	}
	if nearestAt >= 0 {
		// Only the fits' estimates were kept: the nearest miss is
		// estimated again, in full.
		c := cands[nearestAt]
		if e, err := o.Estimator.Estimate(c.variant().Apply(mbases[c.method])); err == nil {
			if p, ok := plan(c, e); ok {
				nearest = &p
			}
		}
	}
	res.Fits = len(all)
	res.Plans = rank(all)
	if res.Fits == 0 && nearest != nil {
		res.Nearest = nearest
		v := nearest.Estimate.Verdict
		need := float64(nearest.Estimate.Total) / estimate.YesRatio
		res.Binding = fmt.Sprintf("GPU memory: the nearest plan needs %.2f GiB per GPU against a budget of %.2f GiB (ratio %.2f; a yes needs ≤ %.2f): %.2f GiB more per GPU, or %.0f %% less memory",
			float64(nearest.Estimate.Total)/estimate.GiB, float64(v.Budget)/estimate.GiB, v.Ratio, estimate.YesRatio,
			(need-float64(v.Budget))/estimate.GiB, 100*(1-estimate.YesRatio/v.Ratio))
	}
	return res, nil
}

// rank sorts plans by compare, equal plans in their given order, in place.
// A Plan is a few hundred bytes: an index per plan is sorted (with the
// index breaking ties, which keeps the order as a stable sort would with
// the O(n log n) comparisons of an unstable one), then each plan is moved
// once, along the permutation's cycles.
func rank(plans []Plan) []Plan {
	order := make([]int32, len(plans))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(i, j int32) int {
		if c := compare(&plans[i], &plans[j]); c != 0 {
			return c
		}
		return cmp.Compare(i, j)
	})
	// plans[i] takes plans[order[i]]: follow each cycle from its first
	// place, holding that place's plan aside until the cycle closes.
	for start := range order {
		if order[start] < 0 {
			continue // moved with an earlier cycle
		}
		held := plans[start]
		i := start
		for {
			from := int(order[i])
			order[i] = -1
			if from == start {
				plans[i] = held
				break
			}
			plans[i] = plans[from]
			i = from
		}
	}
	return plans
}

// Compare ranks plans: those a supported stack runs as estimated before
// those it refuses, then those that train the run as requested before those
// that change the result, then by time to train (plans with a known time
// first), then by cost, then by fewer micro-batches per update (the time
// model does not charge small micro-batches, which run a GPU less
// efficiently), then by memory headroom (lowest ratio first).
func Compare(a, b Plan) int { return compare(&a, &b) }

func compare(a, b *Plan) int {
	if (a.Refused == "") != (b.Refused == "") {
		return boolOrder(a.Refused != "")
	}
	if a.ChangesResult != b.ChangesResult {
		return boolOrder(a.ChangesResult)
	}
	if a.Time.Known != b.Time.Known {
		return boolOrder(!a.Time.Known)
	}
	if c := cmp.Compare(a.Time.Total, b.Time.Total); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Cost, b.Cost); c != 0 {
		return c
	}
	if c := cmp.Compare(a.GradAccum, b.GradAccum); c != 0 {
		return c
	}
	return cmp.Compare(a.Estimate.Verdict.Ratio, b.Estimate.Verdict.Ratio)
}

// boolOrder orders false before true: 1 when the first is the true one.
func boolOrder(firstTrue bool) int {
	if firstTrue {
		return 1
	}
	return -1
}

// Layout is a data-parallel spread: World GPUs over Nodes, each running
// micro-batches of MicroBatch sequences, GradAccum of them per update.
type Layout struct {
	World, Nodes, MicroBatch, GradAccum int64
}

// Layouts lists the spreads that keep the effective batch exactly: 1..n
// GPUs on one node, then 2..Nodes whole nodes, each with every micro-batch
// that divides its share of the batch.
func Layouts(s Space, effective int64) []Layout {
	per, nodes := max(s.GPUsPerNode, 1), max(s.Nodes, 1)
	var worlds [][2]int64 // world, nodes
	for w := int64(1); w <= per; w++ {
		worlds = append(worlds, [2]int64{w, 1})
	}
	for k := int64(2); k <= nodes; k++ {
		worlds = append(worlds, [2]int64{k * per, k})
	}
	var out []Layout
	for _, wn := range worlds {
		w := wn[0]
		if effective%w != 0 {
			continue
		}
		share := effective / w
		for b := int64(1); b <= min(share, estimate.MaxBatch); b++ {
			if share%b == 0 {
				out = append(out, Layout{World: w, Nodes: wn[1], MicroBatch: b, GradAccum: share / b})
			}
		}
	}
	return out
}

type shard struct {
	strategy estimate.Strategy
	offload  estimate.Offload
}

// shardings are the data-parallel strategies tried on more than one GPU:
// DDP; ZeRO 1, 2, 3; FSDP's two sharded modes; and CPU offload with them.
// Across nodes FSDP's hybrid mode (sharded in a node, replicated across) too.
func shardings(nodes int64) []shard {
	s := []shard{{"ddp", "none"}, {"zero1", "none"}, {"zero2", "none"}, {"zero3", "none"},
		{"fsdp_shard_grad_op", "none"}, {"fsdp_full_shard", "none"},
		{"zero2", "optimizer"}, {"zero3", "optimizer"}, {"zero3", "params+optimizer"}, {"fsdp_full_shard", "params+optimizer"}}
	if nodes > 1 {
		s = append(s, shard{"fsdp_hybrid_shard", "none"})
	}
	return s
}

// candidates enumerates the lever settings, and groups their indices by
// every lever but the micro-batch and accumulation, each group in the
// candidates' order (the micro-batch ascending, as Layouts lists it): what
// evaluate prunes along.
func candidates(base estimate.Request, s Space, layouts []Layout) ([]estimate.Method, []candidate, [][]int32) {
	methods := s.Methods
	if methods == nil {
		methods = []estimate.Method{base.Method}
		switch base.Method {
		case estimate.Full:
			methods = append(methods, estimate.LoRA, estimate.QLoRA)
		case estimate.LoRA:
			methods = append(methods, estimate.QLoRA)
		}
	}
	seqs := []int64{base.SeqLen}
	if s.ShorterSeqs {
		for _, d := range []int64{2, 4} {
			if v := base.SeqLen / d; v >= 256 {
				seqs = append(seqs, v)
			}
		}
	}
	ckpts := uniq(base.GradCkpt, "none", "full")
	ces := uniq(base.FusedCE, "liger")
	opts := []estimate.Optimizer{base.Optimizer}
	if !base.Optimizer.Spec().EightBit {
		// An 8-bit optimizer already keeps 8-bit states: no lever left.
		opts = uniq(base.Optimizer, "paged_adamw_8bit")
	}
	// Layouts come in runs of one spread (world, nodes), micro-batch
	// ascending; each run's candidates are its layouts × its shardings.
	type run struct {
		lays   []Layout
		shards []shard
	}
	var runs []run
	perCombo, groupsPerCombo := 0, 0
	for i := 0; i < len(layouts); {
		j := i
		for j < len(layouts) && layouts[j].World == layouts[i].World && layouts[j].Nodes == layouts[i].Nodes {
			j++
		}
		r := run{lays: layouts[i:j], shards: []shard{{"none", "none"}}}
		if layouts[i].World > 1 {
			r.shards = shardings(layouts[i].Nodes)
		}
		runs = append(runs, r)
		perCombo += len(r.lays) * len(r.shards)
		groupsPerCombo += len(r.shards)
		i = j
	}
	combos := len(methods) * len(seqs) * len(ckpts) * len(ces) * len(opts)
	out := make([]candidate, 0, combos*perCombo)
	// Every candidate is in one group: the groups share one backing array.
	members := make([]int32, combos*perCombo)
	groups := make([][]int32, 0, combos*groupsPerCombo)
	type runLevers struct {
		prec   estimate.Precision
		qstore estimate.Dtype
	}
	// The shardings of a run the request's stack runs with the levers at
	// hand (runnable; at most the run's, which the sizes above count),
	// and what their engines run the method's base in.
	var shards []shard
	var as []runLevers
	for _, m := range methods {
		for _, sq := range seqs {
			for _, ck := range ckpts {
				for _, ce := range ces {
					for _, op := range opts {
						for _, r := range runs {
							start := len(out)
							shards = runnable(shards[:0], base, m, ck, ce, op, r.lays[0].World, r.shards)
							as = as[:0]
							for _, sh := range shards {
								p, qs := runAs(base, m, sh.strategy)
								as = append(as, runLevers{p, qs})
							}
							for _, l := range r.lays {
								for k, sh := range shards {
									out = append(out, candidate{method: m, seq: sq, ckpt: ck, ce: ce, opt: op, strategy: sh.strategy, offload: sh.offload,
										prec: as[k].prec, qstore: as[k].qstore, world: l.World, nodes: l.Nodes, micro: l.MicroBatch, accum: l.GradAccum})
								}
							}
							for k := range shards {
								g := members[:len(r.lays):len(r.lays)]
								members = members[len(r.lays):]
								for j := range r.lays {
									g[j] = int32(start + j*len(shards) + k)
								}
								groups = append(groups, g)
							}
						}
					}
				}
			}
		}
	}
	return methods, out, groups
}

func uniq[T comparable](first T, more ...T) []T {
	out := []T{first}
	for _, m := range more {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// apply sets a candidate's levers on the normalized base request, field by
// field: the request the search's fast path (c.variant() on the method's
// base) stands for, which TestSearchFastPathMatchesEstimate holds to it.
func apply(base estimate.Request, c candidate) estimate.Request {
	q := methodBase(base, c.method)
	q.SeqLen, q.GradCkpt, q.FusedCE, q.Optimizer = c.seq, c.ckpt, c.ce, c.opt
	q.Batch, q.GradAccum = c.micro, c.accum
	q.Sharding = estimate.Sharding{Strategy: c.strategy, GPUs: c.world, CPUOffload: c.offload}
	if c.strategy == "fsdp_hybrid_shard" {
		q.Sharding.GPUs = c.world / c.nodes
	}
	// As the engine runs it (runs.go), so that the estimate holds what
	// runs and the recipe can write it.
	q.Precision = RunPrecision(c.strategy, base.Precision)
	if q.Method == estimate.QLoRA {
		q.QuantStorage = RunQuantStorage(base.Stack, c.strategy, q.Method, q.Precision, base.QuantStorage)
	}
	return q
}

// runAs is the precision and 4-bit storage the engine of strategy s runs
// method m's base in (runs.go): what a candidate carries to its variant.
func runAs(base estimate.Request, m estimate.Method, s estimate.Strategy) (estimate.Precision, estimate.Dtype) {
	p, qs := RunPrecision(s, base.Precision), base.QuantStorage
	if m == estimate.QLoRA {
		qs = RunQuantStorage(base.Stack, s, m, p, base.QuantStorage)
	}
	return p, qs
}

// methodBase is the base request trained with method m instead: a full
// fine-tune turned into adapters gets rank 16 on every Linear, and a
// quantized base NF4 with double quantization.
func methodBase(base estimate.Request, m estimate.Method) estimate.Request {
	q := base
	if m != base.Method {
		q.Method = m
		if base.Method == estimate.Full {
			q.LoRARank, q.LoRATargets = 16, []string{"all-linear"}
		}
		q.Quant = ""
		if m == estimate.QLoRA {
			q.Quant = "nf4-dq"
		}
	}
	return q
}

// variant is the candidate's fields of a request, what a prepared
// request's evaluator changes; its method, precision and 4-bit storage
// select the prepared base (preparedBases).
func (c candidate) variant() estimate.Variant {
	v := estimate.Variant{Method: c.method, Precision: c.prec, QuantStorage: c.qstore, SeqLen: c.seq, Batch: c.micro, GradAccum: c.accum,
		GradCkpt: c.ckpt, FusedCE: c.ce, Optimizer: c.opt,
		Sharding: estimate.Sharding{Strategy: c.strategy, GPUs: c.world, CPUOffload: c.offload}}
	if c.strategy == "fsdp_hybrid_shard" {
		v.Sharding.GPUs = c.world / c.nodes
	}
	return v
}

// trades lists what a plan gives up against the request as given, and
// whether it trains another model.
func trades(base, q estimate.Request, t Time) []string {
	var out, changes []string
	if q.Method != base.Method {
		changes = append(changes, fmt.Sprintf("%s instead of %s", q.Method, base.Method))
	}
	if q.SeqLen < base.SeqLen {
		changes = append(changes, fmt.Sprintf("context %d instead of %d (longer samples split or truncated)", q.SeqLen, base.SeqLen))
	}
	if len(changes) > 0 {
		out = append(out, "changes the result: "+strings.Join(changes, ", "))
	}
	if q.GradCkpt != "none" && base.GradCkpt == "none" {
		if t.Known && t.Compute > 0 {
			out = append(out, fmt.Sprintf("+%.0f %% compute for recompute", 100*t.Recompute/t.Compute))
		} else {
			out = append(out, "recomputes the forward in the backward")
		}
	}
	if q.FusedCE != base.FusedCE {
		out = append(out, string(q.FusedCE)+" loss kernel")
	}
	if q.Optimizer != base.Optimizer {
		s := "8-bit optimizer states"
		if q.Optimizer.Spec().Paged {
			s = "8-bit optimizer states in paged (unified) memory"
			if t.Known && t.Offload > 0 && t.Step > 0 && q.Sharding.CPUOffload == "none" {
				s += fmt.Sprintf(", paged to host RAM and back each step (%s of the step on the host link)", share(t.Offload, t.Step))
			}
		}
		out = append(out, s)
	}
	if q.Precision != base.Precision {
		out = append(out, fmt.Sprintf("%s instead of %s: DeepSpeed keeps fp32 master weights", q.Precision, base.Precision))
	}
	if q.Method == estimate.QLoRA && q.QuantStorage != base.QuantStorage {
		out = append(out, fmt.Sprintf("4-bit weights stored as %s so that %s can shard them", q.QuantStorage, q.Sharding.Strategy))
	}
	if q.Method == estimate.QLoRA && base.Method != estimate.QLoRA {
		if t.Known && t.Dequant > 0 && t.Compute > 0 {
			out = append(out, fmt.Sprintf("+%.0f %% time for 4-bit dequantization", 100*t.Dequant/t.Compute))
		} else {
			out = append(out, "dequantizes the 4-bit base before every matmul")
		}
	}
	if st := q.Sharding.Strategy; st != "none" {
		s := fmt.Sprintf("%s over %d GPUs", st, q.Sharding.GPUs)
		if st == "fsdp_hybrid_shard" {
			s = fmt.Sprintf("%s: sharded over the %d GPUs of a node, replicated across nodes", st, q.Sharding.GPUs)
		}
		if t.Known && t.CommExposed > 0 && t.Step > 0 {
			s += fmt.Sprintf(" (%s of the step waits on communication)", share(t.CommExposed, t.Step))
		}
		out = append(out, s)
	}
	if off := q.Sharding.CPUOffload; off != "none" {
		s := "CPU offload of " + strings.ReplaceAll(string(off), "+", " and ")
		if t.Known && t.Offload > 0 && t.Step > 0 {
			s += fmt.Sprintf(" (%s of the step on the host link)", share(t.Offload, t.Step))
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		out = append(out, "nothing: the run as requested")
	}
	return out
}

// share is part/whole as a whole percentage, "<1 %" below one.
func share(part, whole float64) string {
	if p := 100 * part / whole; p >= 0.5 {
		return fmt.Sprintf("%.0f %%", p)
	}
	return "<1 %"
}

// Bisect returns the largest v in lo..hi for which fits(v) holds, assuming
// fits is monotone (true up to a boundary, false after), and lo-1 when
// fits(lo) does not hold. It calls fits O(log(hi-lo)) times.
func Bisect(lo, hi int64, fits func(int64) bool) int64 {
	if hi < lo || !fits(lo) {
		return lo - 1
	}
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// Quantity is what Maximize maximizes.
type Quantity string

// Quantities.
const (
	MaxSeqLen Quantity = "seq-len"
	MaxBatch  Quantity = "batch"
	MaxRank   Quantity = "rank"
)

// Maximum is the largest value of a quantity that fits, and where.
type Maximum struct {
	Quantity Quantity
	// Value fits (verdict yes); Value+1 does not (or Value is the bound).
	Value int64
	// Bound is the largest value searched (the model's limit or the
	// request's bounds).
	Bound int64
	// Plan is the configuration that reaches it.
	Plan *Plan
	// Candidates is the estimates the bisections ran.
	Candidates int
}

// Maximize finds the largest sequence length, micro-batch or LoRA rank that
// fits with the request's own settings (method, checkpointing, optimizer,
// loss kernel as given), on one GPU or spread data-parallel over the GPUs of
// the space with each sharding (the micro-batch is 1 for seq-len and rank).
// Each layout is a bisection on the estimator; the best over layouts wins
// (the fewest GPUs among equal values).
func Maximize(o Options, what Quantity) (*Maximum, error) {
	base, err := o.Request.Normalize()
	if err != nil {
		return nil, err
	}
	out := &Maximum{Quantity: what}
	var lo, hi int64 = 1, 0
	switch what {
	case MaxSeqLen:
		hi = estimate.MaxSeqLen
	case MaxBatch:
		hi = min(estimate.MaxBatch, estimate.MaxTokens/base.SeqLen)
	case MaxRank:
		if base.Method == estimate.Full {
			return nil, fmt.Errorf("%w: --maximize rank needs --method lora or qlora", estimate.ErrInvalidRequest)
		}
		hi = widest(base)
	default:
		return nil, fmt.Errorf("%w: --maximize %q (want seq-len, batch or rank)", estimate.ErrInvalidRequest, what)
	}
	out.Bound = hi
	shape := ShapeOf(base.Model)
	per, nodes := max(o.Space.GPUsPerNode, 1), max(o.Space.Nodes, 1)
	type spread struct {
		world, nodes int64
		sh           shard
	}
	spreads := []spread{{1, 1, shard{"none", "none"}}}
	for _, wn := range [][2]int64{{per, 1}, {per * nodes, nodes}} {
		if wn[0] < 2 || (wn[1] == 1 && nodes > 1 && per < 2) {
			continue
		}
		for _, sh := range shardings(wn[1]) {
			if len(runnable(nil, base, base.Method, base.GradCkpt, base.FusedCE, base.Optimizer, wn[0], []shard{sh})) == 0 {
				continue
			}
			spreads = append(spreads, spread{wn[0], wn[1], sh})
		}
	}
	for _, sp := range spreads {
		c := candidate{method: base.Method, seq: base.SeqLen, ckpt: base.GradCkpt, ce: base.FusedCE, opt: base.Optimizer,
			strategy: sp.sh.strategy, offload: sp.sh.offload, world: sp.world, nodes: sp.nodes, micro: 1, accum: 1}
		c.prec, c.qstore = runAs(base, c.method, c.strategy)
		set := func(v int64) estimate.Request {
			q := apply(base, c)
			switch what {
			case MaxSeqLen:
				q.SeqLen = v
			case MaxBatch:
				q.Batch = v
			case MaxRank:
				q.LoRARank = v
			}
			return q
		}
		fits := func(v int64) bool {
			out.Candidates++
			e, err := o.Estimator.Estimate(set(v))
			return err == nil && e.Verdict.Fit == estimate.FitYes
		}
		v := Bisect(lo, hi, fits)
		if v < lo || (out.Plan != nil && v <= out.Value) {
			continue
		}
		q := set(v)
		e, err := o.Estimator.Estimate(q)
		if err != nil {
			continue
		}
		var w float64
		if q.Method != estimate.Full {
			w, _ = AdapterWidth(q.Model, q.LoRATargets)
		}
		p := Plan{Request: q, Estimate: e, Nodes: sp.nodes, World: sp.world, GPUsPerNode: sp.world / sp.nodes, MicroBatch: q.Batch, GradAccum: 1}
		p.Time = StepTime(o.Hardware, q, e, TokenFLOPs(shape, q, w), q.Model.Params(),
			layout{world: sp.world, perNode: p.GPUsPerNode, nodes: sp.nodes, micro: q.Batch, accum: 1})
		if p.Time.Known && p.Time.Step > 0 {
			p.Time.TokensPerSec = float64(sp.world*q.Batch) * float64(q.SeqLen) / p.Time.Step
		}
		p.ChangesResult = changesResult(base, q)
		out.Value, out.Plan = v, &p
	}
	return out, nil
}

// widest is the largest useful rank: the largest min(in, out) of the
// targeted modules (the request's own bound).
func widest(r estimate.Request) int64 {
	lins, err := r.Model.Targets(r.LoRATargets)
	if err != nil {
		return 1
	}
	var hi int64 = 1
	for _, l := range lins {
		hi = max(hi, min(l.In, l.Out))
	}
	return hi
}
