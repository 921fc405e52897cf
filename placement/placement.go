package placement

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/gpu"
	"github.com/canifinetune/canifinetune/internal/bytesize"
)

// Rule is how many GPUs a model-parallel placement takes.
type Rule int

const (
	// UntilYes adds GPUs, most free memory first, until the verdict on the
	// pool is yes, and uses all of them when even that is not enough: a GPU
	// is left out as "not needed" only when the others already say yes.
	UntilYes Rule = iota
	// Published is Unsloth Studio's auto_select_gpu_ids as published: add
	// GPUs until the pool covers the requirement, even when the pool's
	// verdict is then marginal or no. The unsloth reference estimator keeps
	// it, so that it is compared as published.
	Published
)

// RuleFor is the placement rule that goes with an estimator: Published for
// the unsloth reference, UntilYes for the others.
func RuleFor(estimator string) Rule {
	if estimator == "unsloth" {
		return Published
	}
	return UntilYes
}

// GPUs are the GPUs a run may use and how a data-parallel run spreads over
// them, as the caller's flags and detection decided.
type GPUs struct {
	// Devices are the GPUs a model-parallel placement may use: the detected
	// ones, or the cards of a --gpus list (free memory = what is available).
	Devices []gpu.Device
	// Explicit are the device indices the user named (--gpus 0,2): a
	// placement uses all of them.
	Explicit []int
	// Positional reports that Devices stand for the cards of a --gpus list,
	// numbered by their position in it, rather than detected devices.
	Positional bool
	// Detected reports that Devices are this machine's and the budget is
	// the free memory of one of them.
	Detected bool
	// GPUsPerNode and Nodes are the data-parallel run's GPUs (GPUsPerNode
	// is 1, or --num-gpus, without a strategy).
	GPUsPerNode, Nodes int64
	// Rule is the placement rule (RuleFor the estimator).
	Rule Rule
}

// WorldSize is the data-parallel GPUs in all.
func (g GPUs) WorldSize() int64 { return max(g.GPUsPerNode, 1) * max(g.Nodes, 1) }

// Placement is a model-parallel split of one run across GPUs.
type Placement struct {
	gpu.Selection
	// Reason says why the model is placed across GPUs.
	Reason string
	// Verdict is the pool's: RequiredBytes against UsableBytes.
	Verdict estimate.Verdict
	// SingleGPU is the verdict on the budget card alone.
	SingleGPU estimate.Verdict
}

// Plan is a run judged on its GPUs.
type Plan struct {
	Estimate *estimate.Estimate
	// Verdict is the one that counts: the placement's when the run is
	// placed across GPUs, else the estimate's (per GPU).
	Verdict estimate.Verdict
	// Placement is nil unless the model is split across GPUs.
	Placement *Placement
	// DataParallel is nil without a data-parallel strategy.
	DataParallel *DataParallel
	// Changes make a run that does not fit fit on the same GPUs.
	Changes []estimate.Change
}

// Evaluate estimates a run, places it across the GPUs when it needs them,
// describes its data parallelism, and searches the changes that make it fit.
func Evaluate(est estimate.Estimator, r estimate.Request, g GPUs) (*Plan, error) {
	e, err := est.Estimate(r)
	if err != nil {
		return nil, err
	}
	p, err := g.Place(r, e)
	if err != nil {
		return nil, err
	}
	plan := &Plan{Estimate: e, Verdict: e.Verdict, Placement: p}
	if p != nil {
		plan.Verdict = p.Verdict
	}
	if sharded(r.Sharding.Strategy) {
		plan.DataParallel = g.DataParallel(r, e)
	}
	plan.Changes = Changes(est, r, plan.Verdict, g)
	return plan, nil
}

func sharded(st estimate.Strategy) bool { return st.Spec().DataParallel }

// Place is the model-parallel placement: without a data-parallel strategy,
// a run that does not fit its budget card is split across GPUs (accelerate
// device_map), chosen by free memory with every GPU beyond the first counted
// at 85 % (gpu.SelectGPUs), as many as the Rule takes. GPUs the user named
// are all used. It returns nil when the run is not placed.
func (g GPUs) Place(r estimate.Request, e *estimate.Estimate) (*Placement, error) {
	if sharded(r.Sharding.Strategy) || len(g.Devices) < 2 || e.Verdict.Fit == estimate.FitUnknown {
		return nil, nil
	}
	var sel gpu.Selection
	var err error
	reason := ""
	switch {
	case len(g.Explicit) > 1:
		sel, err = gpu.SelectExplicit(g.Explicit, e.Total, g.Devices)
		reason = "--gpus names several GPUs and no --strategy: the model is split across all of them (device_map)"
	case len(g.Explicit) > 0:
		return nil, nil
	case g.Rule == Published && e.Verdict.Fit == estimate.FitNo:
		sel, err = gpu.SelectGPUs(e.Total, g.Devices)
		reason = fmt.Sprintf("the run does not fit one GPU (ratio %.2f) and no --strategy is given: the model is split across GPUs (device_map)", e.Verdict.Ratio)
	case g.Rule == UntilYes && e.Verdict.Fit != estimate.FitYes:
		sel, err = selectUntilYes(e.Total, g.Devices)
		reason = fmt.Sprintf("the run does not fit one GPU (ratio %.2f) and no --strategy is given: the model is split across GPUs (device_map)", e.Verdict.Ratio)
		if e.Verdict.Fit == estimate.FitMarginal {
			reason = fmt.Sprintf("the run is marginal on one GPU (ratio %.2f) and no --strategy is given: the model is split across GPUs (device_map)", e.Verdict.Ratio)
		}
	default:
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("place the model across GPUs: %w", err)
	}
	if g.Positional {
		reason += "; GPUs are numbered by their position in --gpus"
	}
	return &Placement{Selection: sel, Reason: reason, Verdict: estimate.Classify(sel.RequiredBytes, sel.UsableBytes), SingleGPU: e.Verdict}, nil
}

// selectUntilYes chooses GPUs greedily by free memory until the pool's
// verdict is yes (the requirement is at most 85 % of the pool), else all.
// It asks gpu.SelectGPUs to cover the requirement ÷ 0.85, and 1 KiB more so
// that rounding cannot leave the ratio a hair above the threshold.
func selectUntilYes(required int64, devices []gpu.Device) (gpu.Selection, error) {
	if required <= 0 {
		return gpu.SelectGPUs(required, devices)
	}
	target := required*100/85 + 1<<10
	sel, err := gpu.SelectGPUs(target, devices)
	if err != nil {
		return sel, err
	}
	sel.RequiredBytes = required
	sel.Fits = sel.UsableBytes >= required
	chosen := "GPU " + joinInts(sel.Indices())
	if len(sel.GPUs) > 1 {
		chosen = "GPUs " + joinInts(sel.Indices())
	}
	// gpu.SelectGPUs leaves a GPU out only once the pool covers the target,
	// so a GPU is "not needed" only when the others say yes.
	for i, l := range sel.LeftOut {
		if strings.HasPrefix(l.Reason, "not needed") {
			sel.LeftOut[i].Reason = fmt.Sprintf("not needed: %s, with more free memory, already cover the %s required", chosen, bytesize.Format(required))
		}
	}
	return sel, nil
}

// eligible are the devices a run can use: not MIG, with a free-memory reading.
func eligible(devices []gpu.Device) []gpu.Device {
	var el []gpu.Device
	for _, d := range devices {
		if !d.MIG && d.FreeMiB > 0 && d.TotalMiB > 0 {
			el = append(el, d)
		}
	}
	return el
}

// DataParallelRanks chooses the detected GPUs a data-parallel run of n ranks
// per node uses: the n usable ones (not MIG, with memory readings) with the
// most free memory, most free first, so the last bounds every rank — DDP,
// FSDP and ZeRO keep ranks in lockstep, and the rank with the least free
// memory is the first to run out. n = 0 asks for every usable GPU. It
// returns the chosen GPUs and how many were usable; when fewer than n are,
// it returns them all.
func DataParallelRanks(devices []gpu.Device, n int) (ranks []gpu.Device, usable int) {
	var el []gpu.Device
	for _, d := range devices {
		if !d.MIG && d.FreeMiB >= 0 && d.TotalMiB > 0 {
			el = append(el, d)
		}
	}
	sort.SliceStable(el, func(a, b int) bool { return el[a].FreeMiB > el[b].FreeMiB })
	if n <= 0 || n > len(el) {
		n = len(el)
	}
	return el[:n], len(el)
}

// available is how many GPUs a data-parallel strategy could spread over per
// node: the run's own when it has a strategy, else the GPUs it may use.
func (g GPUs) available(r estimate.Request) int64 {
	if sharded(r.Sharding.Strategy) {
		return g.GPUsPerNode
	}
	n := max(g.GPUsPerNode, 1)
	if len(g.Explicit) > 0 {
		return max(n, int64(len(g.Explicit)))
	}
	return max(n, int64(len(eligible(g.Devices))))
}

// Changes searches the changes that make r fit on these GPUs
// (estimate.Changes, with sharding over the GPUs available and each
// candidate judged by its placement when it is split across GPUs).
func Changes(est estimate.Estimator, r estimate.Request, current estimate.Verdict, g GPUs) []estimate.Change {
	nodes := int64(1)
	if sharded(r.Sharding.Strategy) {
		nodes = max(g.Nodes, 1)
	}
	perNode := g.available(r)
	judge := func(q estimate.Request) (*estimate.Estimate, estimate.Verdict, error) {
		q = g.budgetFor(q, r, perNode)
		e, err := est.Estimate(q)
		if err != nil {
			return nil, estimate.Verdict{}, err
		}
		p, err := g.Place(q, e)
		if err != nil {
			return nil, estimate.Verdict{}, err
		}
		if p != nil {
			return e, p.Verdict, nil
		}
		return e, e.Verdict, nil
	}
	return estimate.Changes(est, r, current, estimate.SearchSpace{GPUsPerNode: perNode, Nodes: nodes, Judge: judge})
}

// budgetFor sets the budget of a candidate that turns a run on this
// machine's GPUs data-parallel: every rank holds the same state, so the
// GPU with the least free memory among the n used bounds it (the budget of
// an unsharded run is the GPU with the most).
func (g GPUs) budgetFor(q, base estimate.Request, n int64) estimate.Request {
	if !g.Detected || len(g.Explicit) > 0 || sharded(base.Sharding.Strategy) || !sharded(q.Sharding.Strategy) {
		return q
	}
	el := eligible(g.Devices)
	if len(el) < 2 {
		return q
	}
	sort.SliceStable(el, func(a, b int) bool { return el[a].FreeMiB > el[b].FreeMiB })
	bound := el[min(int(n), len(el))-1]
	if t := bound.TotalBytes(); t > 0 {
		q.GPUTotal, q.Available = t, min(bound.FreeBytes(), t)
	}
	return q
}

// DataParallel is the per-GPU view of a sharded run.
type DataParallel struct {
	Strategy    estimate.Strategy
	Nodes       int64
	GPUsPerNode int64
	WorldSize   int64
	// ShardGroup is how many GPUs the sharded state is divided by (the world
	// size; one node's GPUs for fsdp_hybrid_shard; 1 for ddp / no_shard).
	ShardGroup int64
	// Offload is the CPU offload; HostPerGPU and HostPerNode the host memory
	// it takes.
	Offload                 estimate.Offload
	HostPerGPU, HostPerNode int64
	// Scaling says what changes with the node count.
	Scaling string
	// CommBuffers are the communication buffers assumed, and whether the
	// total includes them.
	CommBuffers []string
}

// DataParallel describes a sharded run per GPU and per node.
func (g GPUs) DataParallel(r estimate.Request, e *estimate.Estimate) *DataParallel {
	st := r.Sharding.Strategy
	nodes, perNode, world := g.Nodes, g.GPUsPerNode, g.WorldSize()
	d := &DataParallel{Strategy: st, Nodes: nodes, GPUsPerNode: perNode, WorldSize: world, ShardGroup: r.Sharding.GPUs,
		Offload: r.Sharding.CPUOffload, HostPerGPU: e.HostOffload, HostPerNode: e.HostOffload * perNode}
	if st.Spec().Shards == estimate.ShardNothing {
		d.ShardGroup = 1
	}
	switch st {
	case "ddp", "fsdp_no_shard", "zero0":
		d.Scaling = "every GPU holds a full replica: per-GPU memory does not change with the number of GPUs or nodes; more nodes add only all-reduce traffic"
	case "zero1":
		d.Scaling = fmt.Sprintf("optimizer states are divided by the world size (%d node(s) × %d GPUs = %d): each GPU or node added lowers them", nodes, perNode, world)
	case "fsdp_shard_grad_op":
		if countsGatheredModel(e) {
			d.Scaling = fmt.Sprintf("gradients, optimizer states and each GPU's parameter shard are divided by the world size (%d node(s) × %d GPUs = %d); the whole model, gathered from each unit's forward to its backward, is not", nodes, perNode, world)
			break
		}
		fallthrough
	case "zero2":
		d.Scaling = fmt.Sprintf("gradients and optimizer states are divided by the world size (%d node(s) × %d GPUs = %d); the weights are not", nodes, perNode, world)
	case "zero3", "fsdp_full_shard":
		d.Scaling = fmt.Sprintf("weights, gradients and optimizer states are divided by the world size (%d node(s) × %d GPUs = %d); activations and the gathered layers are not", nodes, perNode, world)
	case "fsdp_hybrid_shard":
		d.Scaling = fmt.Sprintf("state is sharded within a node (%d GPUs) and replicated across the %d nodes: adding nodes does not lower per-GPU memory, only more GPUs per node does", perNode, nodes)
	}
	d.CommBuffers = CommBuffers(st, e)
	return d
}

// CommBuffers states the communication-buffer assumptions of a strategy.
// Sources: PyTorch DistributedDataParallel (bucket_cap_mb defaults to 25 MiB;
// gradient_as_bucket_view=False keeps bucket copies the size of the
// gradients), PyTorch FSDP (one unit's parameters all-gathered at a time,
// with forward/backward prefetch one more; limit_all_gathers caps in-flight
// all-gathers), DeepSpeedZeroConfig (reduce_bucket_size and
// allgather_bucket_size default to 5e8 elements, stage3_max_live_parameters
// to 1e9), and NCCL's environment documentation (NCCL_BUFFSIZE defaults to
// 4 MiB per channel and peer).
func CommBuffers(st estimate.Strategy, e *estimate.Estimate) []string {
	nccl := "NCCL's own buffers (NCCL_BUFFSIZE, 4 MiB per channel and peer by default) grow with the peers and are not in the total"
	switch st {
	case "ddp", "fsdp_no_shard":
		return []string{"DDP gradient buckets of bucket_cap_mb = 25 MiB (PyTorch default): with gradient_as_bucket_view=False they copy every gradient, which the total charges (gradients ×2); gradient_as_bucket_view=True saves it", nccl}
	case "zero0":
		n := min(int64(5e8), e.TrainableParams)
		return []string{fmt.Sprintf("DeepSpeed without ZeRO all-reduces the gradients through flat buckets of allreduce_bucket_size (5e8 elements by default): up to %.2f GiB of 16-bit buckets at the end of the backward, a whole copy of a smaller model's gradients, not in the total", bytesize.InGiB(2*n)), nccl}
	case "zero1", "zero2":
		// Bucket bytes in the 16-bit communication dtype: at most one reduce
		// and one all-gather bucket of min(5e8, trainable) elements.
		n := min(int64(5e8), e.TrainableParams)
		return []string{fmt.Sprintf("DeepSpeed reduce_bucket_size and allgather_bucket_size (5e8 elements each by default): up to %.2f GiB of 16-bit buckets at the reduction and the parameter all-gather, not in the total; lower both in the DeepSpeed config to shrink them", bytesize.InGiB(2*n*2)), nccl}
	case "zero3":
		return []string{"ZeRO-3 gathers parameters as layers run: the total charges two gathered layers (the one computing and the one prefetched); stage3_max_live_parameters (1e9 by default) and stage3_prefetch_bucket_size bound what may be live, and reduce_bucket_size (5e8 elements) the gradient buckets, which are not in the total", nccl}
	case "fsdp_shard_grad_op":
		if countsGatheredModel(e) {
			return []string{"SHARD_GRAD_OP all-gathers each unit before its forward and reshards it only after its backward: the total charges the whole gathered model, in the compute dtype, beside the GPU's shard in the forward/backward phase, and the shard alone in the optimizer step; gradients are reduce-scattered after each unit's backward", nccl}
		}
		return []string{"SHARD_GRAD_OP all-gathers each unit before its forward and reshards it only after its backward; this estimator counts it as ZeRO-2, the weights whole on every GPU and no gathered copy beside a shard", nccl}
	default: // fsdp_full_shard, fsdp_hybrid_shard
		return []string{"FSDP all-gathers one unit's parameters at a time and reduce-scatters its gradients; with forward/backward prefetch one more unit is live, which the total charges (two gathered layers); limit_all_gathers=True keeps it so", nccl}
	}
}

// countsGatheredModel: the estimator charges SHARD_GRAD_OP's gathered model
// beside the rank's parameter shard (the default estimator does; the
// reference estimators read the strategy as ZeRO-2).
func countsGatheredModel(e *estimate.Estimate) bool {
	return e.Estimator == estimate.PhasePeak{}.Name()
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
