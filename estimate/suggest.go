package estimate

import (
	"cmp"
	"fmt"
	"github.com/canifinetune/canifinetune/internal/bytesize"
	"slices"
	"strings"
)

// Lever is a kind of change a user can make to a run to lower its memory.
type Lever string

// Levers, in the order Changes tries them.
const (
	LeverGradCkpt   Lever = "grad_ckpt"
	LeverLossKernel Lever = "loss_kernel"
	LeverOptimizer  Lever = "optimizer"
	LeverSharding   Lever = "sharding"
	LeverStack      Lever = "stack"
	LeverMethod     Lever = "method"
	LeverBatch      Lever = "batch"
	LeverSeqLen     Lever = "seq_len"
)

// Compute costs of the levers, as fractions of a step's compute.
const (
	// RecomputeCost is one more forward pass per step: activation
	// checkpointing recomputes each layer's forward during the backward
	// (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost"),
	// and a forward is about a third of a training step's FLOPs (the
	// backward costs about twice the forward, Kaplan et al. 2020 §2.1).
	RecomputeCost = 1.0 / 3
	// QLoRACost is the slowdown of a 4-bit base against a 16-bit one: the
	// weights are dequantized at every use. Raschka, "Practical Tips for
	// Finetuning LLMs Using LoRA" (2023): QLoRA saved 33 % memory at 39 %
	// more training time on a 7B model.
	QLoRACost = 0.39
)

// Edit is one lever set to one value.
type Edit struct {
	Lever Lever
	// Value is the lever's new value ("full", "qlora", "zero3+optimizer").
	Value string
	// Flags is the edit as the command line spells it ("--grad-ckpt full").
	Flags string
	apply func(*Request)
}

// Cost is what a change costs besides memory. Changes ranks changes that
// keep the trained result and move nothing to the host first, then by
// compute, then by host traffic.
type Cost struct {
	// ExtraCompute is the step's added compute as a fraction (0.33: one more
	// forward pass); 0 when the change adds none that is known.
	ExtraCompute float64
	// OffloadBytes is an estimate of the bytes moved between host and GPU per
	// step and GPU by CPU offload (its time depends on the host link).
	OffloadBytes int64
	// ChangesResult: the change trains a different model or on different
	// data (method, shorter sequences), not the same run in less memory.
	ChangesResult bool
	// Notes say what the figures leave out (communication volume, quality).
	Notes []string
}

// Change is one edit, or a pair, that makes a run fit, with its estimate.
type Change struct {
	// What is the flag-level change, e.g. "--grad-ckpt full --method qlora".
	What  string
	Edits []Edit
	// Request is the changed request; Estimate its estimate.
	Request  Request
	Estimate *Estimate
	// Verdict is the changed run's verdict as the search judged it (for a
	// run placed across GPUs, the placement's).
	Verdict Verdict
	// Saves is the planning total saved, in bytes.
	Saves int64
	Cost  Cost
}

// Judge estimates a candidate request and gives its verdict. The default
// is the estimator's own per-GPU verdict; a multi-GPU caller judges by the
// placement across its GPUs.
type Judge func(Request) (*Estimate, Verdict, error)

// SearchSpace is what the search may change besides the request's own fields.
type SearchSpace struct {
	// GPUsPerNode and Nodes are the GPUs a data-parallel strategy may spread
	// over; with fewer than 2 in all, sharding and offload are not tried.
	GPUsPerNode, Nodes int64
	// Judge, when set, replaces the estimator's own verdict.
	Judge Judge
}

// Changes tries the levers on a request whose verdict is current and that
// does not fit: checkpointing, a fused or chunked loss, an 8-bit optimizer,
// sharding and CPU offload across the GPUs of the space, a framework stack,
// the method (full → LoRA → QLoRA), a smaller batch or sequence. It tries
// each alone and, when none is enough, every pair of different levers, and
// returns those that make the run fit (verdict yes), ranked by cost (see
// Cost), then by headroom (lowest ratio first). It returns nothing when the
// request already fits or has no budget to fit into. r is the request as
// the user gave it (before Normalize), so that a stack fills what the user
// left unset, as --stack would.
func Changes(est Estimator, r Request, current Verdict, space SearchSpace) []Change {
	if current.Fit == FitYes || current.Fit == FitUnknown {
		return nil
	}
	base, err := r.Normalize()
	if err != nil {
		return nil
	}
	judge := space.Judge
	if judge == nil {
		judge = func(q Request) (*Estimate, Verdict, error) {
			e, err := est.Estimate(q)
			if err != nil {
				return nil, Verdict{}, err
			}
			return e, e.Verdict, nil
		}
	}
	baseEst, _, err := judge(detached(r))
	if err != nil {
		return nil
	}
	edits := leverEdits(base, space)
	try := func(eds ...Edit) (Change, bool) {
		q := detached(r)
		for _, ed := range eds {
			ed.apply(&q)
		}
		n, err := q.Normalize()
		if err != nil || sameRun(n, base) {
			return Change{}, false
		}
		e, v, err := judge(q)
		if err != nil || v.Fit != FitYes {
			return Change{}, false
		}
		var flags []string
		for _, ed := range eds {
			flags = append(flags, ed.Flags)
		}
		return Change{What: strings.Join(flags, " "), Edits: eds, Request: q, Estimate: e, Verdict: v,
			Saves: baseEst.Total - e.Total, Cost: costOf(base, n, e)}, true
	}
	var out []Change
	for _, ed := range edits {
		if c, ok := try(ed); ok {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		for i := range edits {
			for j := i + 1; j < len(edits); j++ {
				if edits[i].Lever == edits[j].Lever {
					continue
				}
				if c, ok := try(edits[i], edits[j]); ok {
					out = append(out, c)
				}
			}
		}
	}
	slices.SortStableFunc(out, compareChanges)
	return out
}

// compareChanges orders by cost, then headroom: changes that keep the
// trained result first, then those that move nothing to the host (offload's
// time depends on the host link and is often the largest), then by added
// compute, host traffic, and the lowest ratio.
func compareChanges(a, b Change) int {
	bit := func(x bool) int {
		if x {
			return 1
		}
		return 0
	}
	return cmp.Or(
		cmp.Compare(bit(a.Cost.ChangesResult), bit(b.Cost.ChangesResult)),
		cmp.Compare(bit(a.Cost.OffloadBytes > 0), bit(b.Cost.OffloadBytes > 0)),
		cmp.Compare(int(100*a.Cost.ExtraCompute+0.5), int(100*b.Cost.ExtraCompute+0.5)),
		cmp.Compare(a.Cost.OffloadBytes, b.Cost.OffloadBytes),
		cmp.Compare(a.Verdict.Ratio, b.Verdict.Ratio),
	)
}

// detached copies a request with slices of its own, so that an edit to a
// candidate cannot change the request it came from.
func detached(r Request) Request {
	r.LoRATargets = slices.Clone(r.LoRATargets)
	r.ExtraTrainable = slices.Clone(r.ExtraTrainable)
	return r
}

// sameRun reports whether an edit left the normalized request as it was
// (the lever was already where the edit puts it).
func sameRun(a, b Request) bool {
	return a.Method == b.Method && a.Quant == b.Quant && a.GradCkpt == b.GradCkpt && a.FusedCE == b.FusedCE &&
		a.Optimizer == b.Optimizer && a.Sharding == b.Sharding && a.Stack == b.Stack && a.Batch == b.Batch &&
		a.SeqLen == b.SeqLen && a.Precision == b.Precision && a.Attn == b.Attn && a.OptimizerStateDtype == b.OptimizerStateDtype
}

// leverEdits lists the edits worth trying on a normalized request.
func leverEdits(r Request, space SearchSpace) []Edit {
	var eds []Edit
	add := func(l Lever, value, flags string, apply func(*Request)) {
		eds = append(eds, Edit{Lever: l, Value: value, Flags: flags, apply: apply})
	}
	if r.GradCkpt == CkptNone || r.GradCkpt.Spec().OpPolicy {
		add(LeverGradCkpt, "full", "--grad-ckpt full", func(q *Request) { q.GradCkpt = CkptFull })
	}
	if r.FusedCE == LossNone {
		add(LeverLossKernel, "liger", "--fused-ce liger", func(q *Request) { q.FusedCE = LossLiger })
		add(LeverLossKernel, "chunked", "--fused-ce chunked", func(q *Request) { q.FusedCE = LossChunked })
	}
	if o := r.Optimizer.Spec(); !o.EightBit && o.States > 0 {
		add(LeverOptimizer, "paged_adamw_8bit", "--optimizer paged_adamw_8bit", func(q *Request) { q.Optimizer = PagedAdamW8bit })
	}
	eds = append(eds, shardingEdits(r, space)...)
	if r.Stack == "" {
		for _, st := range stacks {
			if st.NoLever {
				continue
			}
			add(LeverStack, string(st.Name), "--stack "+string(st.Name), func(q *Request) { st.Apply(q) })
		}
	}
	switch r.Method {
	case Full:
		add(LeverMethod, "lora", "--method lora", func(q *Request) {
			q.Method, q.LoRARank, q.LoRATargets = LoRA, 16, []string{"all-linear"}
		})
		add(LeverMethod, "qlora", "--method qlora", func(q *Request) {
			q.Method, q.Quant, q.LoRARank, q.LoRATargets = QLoRA, NF4DQ, 16, []string{"all-linear"}
		})
	case LoRA:
		add(LeverMethod, "qlora", "--method qlora", func(q *Request) { q.Method, q.Quant = QLoRA, NF4DQ })
	}
	if r.Batch > 1 {
		b := max(r.Batch/2, 1)
		add(LeverBatch, fmt.Sprint(b), fmt.Sprintf("--batch %d", b), func(q *Request) { q.Batch = b })
	}
	if r.SeqLen >= 512 {
		s := r.SeqLen / 2
		add(LeverSeqLen, fmt.Sprint(s), fmt.Sprintf("--seq-len %d", s), func(q *Request) { q.SeqLen = s })
	}
	return eds
}

// shardingEdits are the data-parallel strategies and CPU offloads that hold
// less per GPU than the request's, over the GPUs of the space. A run that
// already names a family (FSDP or DeepSpeed ZeRO) stays in it; DDP and
// fsdp_no_shard replicate everything and never save memory.
func shardingEdits(r Request, space SearchSpace) []Edit {
	perNode, nodes := space.GPUsPerNode, max(space.Nodes, 1)
	if perNode*nodes < 2 {
		return nil
	}
	type opt struct {
		strategy Strategy
		offload  Offload
	}
	opts := []opt{{ZeRO2, OffloadNone}, {ZeRO3, OffloadNone}, {ZeRO2, OffloadOptimizer}, {ZeRO3, OffloadOptimizer}, {ZeRO3, OffloadParamsOptimizer}}
	if r.Sharding.Strategy.Spec().Family == FamilyFSDP {
		opts = []opt{{FSDPShardGradOp, OffloadNone}, {FSDPFullShard, OffloadNone}, {FSDPFullShard, OffloadParamsOptimizer}}
		if r.Sharding.Strategy == FSDPHybridShard {
			opts = append(opts, opt{FSDPHybridShard, OffloadParamsOptimizer})
		}
	}
	var eds []Edit
	for _, o := range opts {
		if o.strategy == r.Sharding.Strategy && o.offload == r.Sharding.CPUOffload || shardRank(o.strategy) < shardRank(r.Sharding.Strategy) {
			continue
		}
		gpus := perNode * nodes
		if o.strategy.Spec().PerNode {
			gpus = perNode
		}
		var flags []string
		if o.strategy != r.Sharding.Strategy {
			flags = append(flags, "--strategy "+string(o.strategy))
		}
		if o.offload != r.Sharding.CPUOffload {
			flags = append(flags, "--offload "+string(o.offload))
		}
		value := string(o.strategy)
		if o.offload != OffloadNone {
			value += "+" + string(o.offload)
		}
		eds = append(eds, Edit{Lever: LeverSharding, Value: value, Flags: strings.Join(flags, " "), apply: func(q *Request) {
			q.Sharding = Sharding{Strategy: o.strategy, GPUs: gpus, CPUOffload: o.offload}
		}})
	}
	return eds
}

// shardRank orders strategies by how much of the state they divide.
func shardRank(st Strategy) ShardLevel { return st.Spec().Shards }

// costOf is what moving from request a to b costs, both normalized; e is
// b's estimate. It reads the differences, so a stack costs what it changes.
func costOf(a, b Request, e *Estimate) Cost {
	var c Cost
	// The per-op policy recomputes only the matmuls it does not keep
	// (OpPolicyRecomputedShare of the full recomputation, roughly).
	recomputed := func(q Request) float64 {
		switch ck := q.GradCkpt.Spec(); {
		case ck.OpPolicy:
			return OpPolicyRecomputedShare(q.Model)
		case ck.Recomputes:
			return 1
		}
		return 0
	}
	if more := recomputed(b) - recomputed(a); more > 0 {
		c.ExtraCompute += RecomputeCost * more
		if b.GradCkpt.Spec().OpPolicy {
			c.Notes = append(c.Notes, "recomputes the matmuls the per-op policy does not keep")
		} else {
			c.Notes = append(c.Notes, "recomputes each layer's forward in the backward")
		}
	}
	if a.Method != b.Method {
		c.ChangesResult = true
		c.Notes = append(c.Notes, fmt.Sprintf("trains %s instead of %s: a different result", b.Method, a.Method))
		if b.Method == QLoRA {
			c.ExtraCompute += QLoRACost
		}
	}
	if b.SeqLen < a.SeqLen {
		c.ChangesResult = true
		c.Notes = append(c.Notes, "longer samples are truncated or split")
	}
	if b.Batch < a.Batch {
		c.Notes = append(c.Notes, fmt.Sprintf("--grad-accum %d keeps the update size; smaller micro-batches use the GPU less efficiently", max(a.GradAccum, 1)*a.Batch/b.Batch))
	}
	if b.Optimizer.Spec().EightBit && !a.Optimizer.Spec().EightBit {
		c.Notes = append(c.Notes, "8-bit optimizer states (bitsandbytes block-wise quantization)")
	}
	if shardRank(b.Sharding.Strategy) > shardRank(a.Sharding.Strategy) {
		vol := "the same communication volume as DDP"
		if shardRank(b.Sharding.Strategy) == ShardParameters {
			vol = "1.5× DDP's communication volume (parameters all-gathered in forward and backward)"
		}
		c.Notes = append(c.Notes, fmt.Sprintf("%s over %d GPUs: %s (ZeRO paper, Rajbhandari et al. 2020 §7)", b.Sharding.Strategy, b.Sharding.GPUs, vol))
	}
	if b.Sharding.CPUOffload != a.Sharding.CPUOffload && b.Sharding.CPUOffload != OffloadNone && e != nil {
		n := max(b.Sharding.GPUs, 1)
		off := b.Sharding.CPUOffload.Spec()
		if off.Optimizer {
			// Gradients go to the host and updated 16-bit weights come back.
			c.OffloadBytes += 4 * e.TrainableParams / n
		}
		if off.Params {
			// The 16-bit weights come in for the forward and again for the backward.
			c.OffloadBytes += 2 * 2 * e.Params / n
		}
		c.Notes = append(c.Notes, fmt.Sprintf("CPU offload moves about %.2f GiB per step and GPU over the host link", bytesize.InGiB(c.OffloadBytes)))
	}
	if e != nil && e.PagedOptimizer > 0 && e.Verdict.Budget > 0 {
		// A paged optimizer's states that do not stay resident beside the
		// run are paged in for the step and out again (paged.go).
		if over := e.PagedSpill(); over > 0 {
			c.OffloadBytes += 2 * over
			c.Notes = append(c.Notes, fmt.Sprintf("%.2f GiB of the paged optimizer's states do not fit beside the run: paged to host RAM and back, about %.2f GiB per step over the host link", bytesize.InGiB(over), bytesize.InGiB(2*over)))
		} else {
			c.Notes = append(c.Notes, fmt.Sprintf("the paged optimizer's %.2f GiB of states stay on the card beside the run (unified memory, outside the total)", bytesize.InGiB(e.PagedOptimizer)))
		}
	}
	return c
}
