package cli

import (
	"context"
	"errors"
	"fmt"
	"github.com/canifinetune/canifinetune/internal/report"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/gpu"
	"github.com/canifinetune/canifinetune/gpu/probe"
	"github.com/canifinetune/canifinetune/internal/bytesize"
	"github.com/canifinetune/canifinetune/placement"
)

// autoDetectTimeout bounds the GPU probe of `estimate`. A healthy nvidia-smi
// answers in well under a second; an estimate is a planning question that
// must not wait on a wedged driver (doctor, which exists to diagnose one,
// waits longer: probe.DefaultTimeout).
const autoDetectTimeout = 3 * time.Second

// Budget sources, the stable values of the JSON field gpu.budget_source.
const (
	budgetDetectedFree = "detected free memory"
	budgetFlagFree     = "--available-vram-gb"
	budgetCardTotal    = "card total"
)

// gpuSetup is what --gpu, --gpus, --gpu-vram-gb, --num-gpus, --nodes and
// detection decided: which card's memory the per-GPU verdict is measured
// against, and which GPUs a placement may use.
type gpuSetup struct {
	// card is the table row of the budget card (nil for --gpu-vram-gb or a
	// detected card not in the table); name is what output calls it.
	card *gpu.Card
	name string
	// detected: the budget card is a detected device, index its index.
	detected bool
	index    int
	// budgetSource is one of the budget* constants ("" without a budget).
	budgetSource string
	// devices are the GPUs a model-parallel placement may use: the detected
	// ones, or the cards of a --gpus list (FreeMiB = what is available).
	devices []gpu.Device
	// explicit are the indices of --gpus 0,2.
	explicit []int
	// listed is the number of GPUs --gpus names (0 without --gpus).
	listed int
	// detection is what the probe found, nil when it did not run.
	detection *report.Detection
	// perNode and world are the data-parallel GPUs per node and in all.
	perNode, world int64
	notes          []string
}

// resolveGPUs turns the GPU flags, and when none names a card the detected
// GPUs, into req.GPUTotal, req.Available and req.Sharding.GPUs.
func (c *EstimateCmd) resolveGPUs(env *Env, req *estimate.Request) (*gpuSetup, error) {
	s := &gpuSetup{index: -1}
	if c.GPUVRAMGB < 0 || c.AvailableGB < 0 {
		return nil, usageErrorf("--gpu-vram-gb 24 --available-vram-gb 21.5", "GPU memory must be positive (got --gpu-vram-gb %v --available-vram-gb %v)", c.GPUVRAMGB, c.AvailableGB)
	}
	auto := strings.EqualFold(c.GPU, "auto")
	named := c.GPU != "" && !auto
	if c.GPUs != "" && (named || c.GPUVRAMGB > 0 || auto) {
		return nil, usageErrorf("--gpus 4xA100-80GB  (or --gpu a100-80gb for one card)", "--gpus %q names the GPUs already: drop --gpu / --gpu-vram-gb", c.GPUs)
	}
	if auto && c.GPUVRAMGB > 0 {
		return nil, usageErrorf("--gpu auto  or  --gpu-vram-gb 24", "--gpu auto reads the card's memory: drop --gpu-vram-gb")
	}
	if c.Nodes < 1 {
		return nil, usageErrorf("--nodes 2", "--nodes %d: a run has at least one node", c.Nodes)
	}
	if c.NumGPUs < 0 {
		return nil, usageErrorf("--num-gpus 4", "--num-gpus %d: a run has at least one GPU per node", c.NumGPUs)
	}
	var err error
	switch {
	case c.GPUs != "" && gpu.LooksLikeIndexList(c.GPUs):
		err = c.fromIndices(env, req, s)
	case c.GPUs != "":
		err = c.fromCardList(req, s)
	case named || c.GPUVRAMGB > 0:
		s.card, err = c.card(req)
		if err == nil {
			s.budgetSource = budgetCardTotal
			if req.Available > 0 {
				s.budgetSource = budgetFlagFree
			}
			if s.card != nil {
				s.name = s.card.Name
			}
		}
	default:
		err = c.fromDetection(env, req, s)
	}
	if err != nil {
		return nil, err
	}
	return s, c.worldSize(req, s)
}

// detect runs the bounded probe and records what it found.
func detect(env *Env, s *gpuSetup) (gpu.Inventory, error) {
	ctx, cancel := context.WithTimeout(context.Background(), autoDetectTimeout)
	defer cancel()
	inv, err := DetectGPUs(ctx, env, autoDetectTimeout)
	d := &report.Detection{Tool: inv.Tool, GPUs: []report.Detected{}}
	switch {
	case err == nil:
		d.Status = "found"
		for _, g := range inv.GPUs {
			d.GPUs = append(d.GPUs, report.Detected{Index: g.Index, Name: g.Name, TotalBytes: g.TotalBytes(), FreeBytes: g.FreeBytes(), MIG: g.MIG})
		}
	case errors.Is(err, gpu.ErrNoGPU):
		d.Status, d.Message = "none", err.Error()
	case errors.Is(err, probe.ErrProbeTimeout):
		d.Status, d.Message = "timeout", fmt.Sprintf("no answer within %s: %v", autoDetectTimeout, err)
	default:
		d.Status, d.Message = "failed", err.Error()
	}
	s.detection = d
	return inv, err
}

// fromDetection is --gpu auto: the detected card with the most free memory.
// Seed 000: the verdict compares with the memory free now, while overhead
// allowances are sized from the card's total.
func (c *EstimateCmd) fromDetection(env *Env, req *estimate.Request, s *gpuSetup) error {
	inv, err := detect(env, s)
	if err != nil {
		if c.AvailableGB > 0 {
			return usageErrorf("--gpu rtx-4090 --available-vram-gb 21.5", "--available-vram-gb needs the card's total too, and no GPU was detected (%s): pass --gpu or --gpu-vram-gb", s.detection.Message)
		}
		if s.detection.Status == "none" {
			s.notes = append(s.notes, "no GPU detected ("+s.detection.Message+"): no verdict")
		} else {
			s.notes = append(s.notes, "GPU detection "+s.detection.Status+" ("+s.detection.Message+"): no verdict")
		}
		return nil
	}
	s.devices = inv.GPUs
	d, ok := inv.MostFree()
	if !ok {
		for _, g := range inv.GPUs {
			switch {
			case g.MIG:
				s.notes = append(s.notes, fmt.Sprintf("GPU %d (%s) has MIG enabled: no process sees the whole card; pass the memory of your MIG instance as --gpu-vram-gb (e.g. 40 for a 3g.40gb slice)", g.Index, g.Name))
			default:
				s.notes = append(s.notes, fmt.Sprintf("GPU %d (%s) reports no free memory reading: pass --gpu-vram-gb and --available-vram-gb (see canifinetune doctor)", g.Index, g.Name))
			}
		}
		s.notes = append(s.notes, "no detected GPU can be planned for: no verdict")
		return nil
	}
	if err := s.useDevice(req, d, budgetDetectedFree); err != nil {
		return err
	}
	if c.AvailableGB > 0 {
		req.Available = int64(c.AvailableGB * estimate.GiB)
		s.budgetSource = budgetFlagFree
		if req.Available > req.GPUTotal {
			return usageErrorf("--available-vram-gb below the card's total", "--available-vram-gb %.2f exceeds detected GPU %d's %.2f GiB", c.AvailableGB, d.Index, bytesize.InGiB(req.GPUTotal))
		}
	}
	if n := len(inv.GPUs); n > 1 {
		s.notes = append(s.notes, fmt.Sprintf("GPU %d has the most free memory of the %d detected", d.Index, n))
	}
	for _, g := range inv.GPUs {
		if g.MIG {
			s.notes = append(s.notes, fmt.Sprintf("GPU %d (%s) has MIG enabled and is not planned for: no process sees the whole card", g.Index, g.Name))
		}
	}
	return nil
}

// useDevice makes d the budget card: its free memory is the budget, its
// total sizes the overheads (seed 000).
func (s *gpuSetup) useDevice(req *estimate.Request, d gpu.Device, source string) error {
	total, free := d.TotalBytes(), d.FreeBytes()
	if total <= 0 && d.Card != nil {
		total = d.Card.MemoryBytes()
	}
	if total <= 0 || free < 0 {
		return withHint(ExitError, fmt.Errorf("GPU %d (%s): the driver reports no memory reading", d.Index, d.Name), "--gpu NAME or --gpu-vram-gb N --available-vram-gb N")
	}
	req.GPUTotal, req.Available = total, min(free, total)
	if req.Available == 0 {
		// A full card has no budget at all; 0 would read as "not given".
		req.Available = 1
	}
	s.card, s.name, s.detected, s.index, s.budgetSource = d.Card, d.Name, true, d.Index, source
	return nil
}

// fromIndices is --gpus 0,2: detected GPUs by index (seed 001's
// resolve_requested_gpu_ids), validated against the machine.
func (c *EstimateCmd) fromIndices(env *Env, req *estimate.Request, s *gpuSetup) error {
	idx, err := gpu.ParseIndexList(c.GPUs)
	if err != nil {
		return usageErrorf("--gpus 0,2  (indices as canifinetune doctor lists them)", "--gpus: %v", err)
	}
	if c.AvailableGB > 0 {
		return usageErrorf("--gpus "+c.GPUs+"  (free memory is read from the GPUs), or --gpus 2xA100-80GB --available-vram-gb 70", "--available-vram-gb does not go with detected GPUs: their free memory is measured")
	}
	inv, err := detect(env, s)
	if err != nil {
		return usageErrorf("--gpus 4xA100-80GB to plan for cards by name; canifinetune doctor shows what is detected", "--gpus %s names detected GPUs, but detection found none: %s", c.GPUs, s.detection.Message)
	}
	if _, err := gpu.SelectExplicit(idx, 0, inv.GPUs); err != nil {
		return usageErrorf("canifinetune doctor  (lists the detected GPUs and their indices)", "--gpus %s: %v", c.GPUs, err)
	}
	s.devices, s.explicit, s.listed = inv.GPUs, idx, len(idx)
	// Every rank of a data-parallel run holds the same state, so the GPU
	// with the least free memory bounds it.
	bound, _ := inv.Device(idx[0])
	for _, i := range idx[1:] {
		if d, _ := inv.Device(i); d.FreeMiB < bound.FreeMiB {
			bound = d
		}
	}
	if err := s.useDevice(req, bound, budgetDetectedFree); err != nil {
		return err
	}
	if len(idx) > 1 {
		s.notes = append(s.notes, fmt.Sprintf("GPU %d has the least free memory of --gpus %s: the verdict per GPU is measured against it", bound.Index, c.GPUs))
	}
	return nil
}

// fromCardList is --gpus 4xA100-80GB or 2xH100,1x4090: cards by name.
func (c *EstimateCmd) fromCardList(req *estimate.Request, s *gpuSetup) error {
	specs, err := gpu.ParseGPUList(c.GPUs)
	if err != nil {
		return usageErrorf("--gpus 4xA100-80GB, --gpus 2xH100,1x4090 or --gpus 0,2 (detected indices); canifinetune gpus lists the cards", "--gpus: %v", err)
	}
	small := specs[0].Card
	kinds := map[string]bool{}
	for _, sp := range specs {
		kinds[sp.Card.Name] = true
		if sp.Card.MemoryMiB < small.MemoryMiB {
			small = sp.Card
		}
	}
	req.GPUTotal = small.MemoryBytes()
	s.card, s.name, s.budgetSource = &small, small.Name, budgetCardTotal
	s.listed = gpu.TotalGPUs(specs)
	if c.AvailableGB > 0 {
		req.Available = int64(c.AvailableGB * estimate.GiB)
		s.budgetSource = budgetFlagFree
		if req.Available > req.GPUTotal {
			return usageErrorf("--available-vram-gb below the smallest card's total", "--available-vram-gb %.2f exceeds %s's %.2f GiB", c.AvailableGB, small.Name, bytesize.InGiB(req.GPUTotal))
		}
	}
	// Cards named by the list stand in for devices, so that placement works
	// the same on a plan as on a machine; their indices are list positions.
	i := 0
	for _, sp := range specs {
		for range sp.Count {
			free := sp.Card.MemoryMiB
			if c.AvailableGB > 0 {
				free = min(free, req.Available/gpu.MiB)
			}
			card := sp.Card
			s.devices = append(s.devices, gpu.Device{Index: i, Name: card.Name, TotalMiB: card.MemoryMiB, FreeMiB: free, UsedMiB: card.MemoryMiB - free, Card: &card})
			i++
		}
	}
	if len(kinds) > 1 {
		s.notes = append(s.notes, fmt.Sprintf("heterogeneous GPUs: the smallest, %s (%.2f GiB), bounds a data-parallel run — every rank holds the same per-GPU state and the others wait for it", small.Name, bytesize.InGiB(req.GPUTotal)))
	}
	return nil
}

// worldSize sets the data-parallel world size: --num-gpus GPUs per node (by
// default as many as --gpus names, or for a sharded run on this machine the
// detected GPUs) times --nodes. fsdp_hybrid_shard shards within a node and
// replicates across nodes, so its shard group is one node's GPUs.
func (c *EstimateCmd) worldSize(req *estimate.Request, s *gpuSetup) error {
	sharded := c.Strategy.Spec().DataParallel
	if !sharded && c.Nodes > 1 {
		return usageErrorf("--strategy fsdp_full_shard --nodes 2 --num-gpus 8", "--nodes %d needs a data-parallel --strategy: without one every GPU holds the whole run", c.Nodes)
	}
	if !sharded && c.Offload != "none" {
		return usageErrorf("--strategy zero3 --offload "+string(c.Offload), "--offload %s needs a --strategy: CPU offload is part of FSDP or DeepSpeed ZeRO", c.Offload)
	}
	perNode := c.NumGPUs
	switch {
	case s.listed > 0 && perNode > 0 && perNode != int64(s.listed):
		return usageErrorf("--gpus "+c.GPUs+"  (without --num-gpus)", "--num-gpus %d and --gpus %s (%d GPUs) disagree: give one", perNode, c.GPUs, s.listed)
	case s.listed > 0 && sharded:
		perNode = int64(s.listed)
	case perNode == 0 && sharded && s.detected && c.GPUs == "":
		if err := s.dataParallelOnDetected(req, 0); err != nil {
			return err
		}
		perNode = s.perNode
	case perNode > 0 && sharded && s.detected && c.GPUs == "":
		if err := s.dataParallelOnDetected(req, perNode); err != nil {
			return err
		}
	}
	if perNode == 0 {
		perNode = 1
	}
	s.perNode, s.world = perNode, perNode*c.Nodes
	if sharded && s.world < 2 {
		return usageErrorf("--strategy "+string(c.Strategy)+" --num-gpus 4  (or --gpus 4xA100-80GB, --nodes 2)", "--strategy %s needs at least 2 GPUs in all; have %d", c.Strategy, s.world)
	}
	switch {
	case c.Strategy.Spec().PerNode:
		req.Sharding.GPUs = perNode
	case sharded:
		req.Sharding.GPUs = s.world
	case c.NumGPUs > 0:
		// Today's --num-gpus without a strategy: replicas, said so by the estimator.
		req.Sharding.GPUs = c.NumGPUs
	default:
		req.Sharding.GPUs = 1
	}
	if sharded && c.Nodes > 1 && s.detected {
		s.notes = append(s.notes, fmt.Sprintf("the other %d nodes are assumed to match this one", c.Nodes-1))
	}
	return nil
}

// dataParallelOnDetected plans a sharded run on this machine's GPUs: the n
// with the most free memory (all eligible when n is 0); the one with the
// least free among them bounds every rank.
func (s *gpuSetup) dataParallelOnDetected(req *estimate.Request, n int64) error {
	use, usable := placement.DataParallelRanks(s.devices, int(n))
	if n == 0 {
		n = int64(usable)
	}
	if n < 2 || usable == 0 {
		s.perNode = n
		return nil
	}
	bound := use[len(use)-1]
	if err := s.useDevice(req, bound, budgetDetectedFree); err != nil {
		return err
	}
	s.perNode = n
	var idx []int
	for _, d := range use {
		idx = append(idx, d.Index)
	}
	slices.Sort(idx)
	// The most-free note of fromDetection no longer names the budget card.
	s.notes = slices.DeleteFunc(s.notes, func(n string) bool { return strings.Contains(n, "has the most free memory of the") })
	msg := fmt.Sprintf("data-parallel over detected GPUs %s: GPU %d has the least free memory and bounds every rank", joinIndex(idx), bound.Index)
	if others := slices.DeleteFunc(slices.Clone(idx), func(i int) bool { return i == bound.Index }); len(others) >= 2 {
		msg += fmt.Sprintf(" (--gpus %s leaves it out)", joinIndex(others))
	}
	if int(n) > usable {
		msg = fmt.Sprintf("%d GPUs asked for, %d detected can be used: the others are assumed to match GPU %d", n, usable, bound.Index)
	}
	s.notes = append(s.notes, msg)
	return nil
}

func joinIndex(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

// placementGPUs is what the GPU setup hands the library: the GPUs a
// placement may use and the data-parallel world.
func (s *gpuSetup) placementGPUs(c *EstimateCmd, estimator string) placement.GPUs {
	return placement.GPUs{Devices: s.devices, Explicit: s.explicit, Positional: !s.detected, Detected: s.detected,
		GPUsPerNode: s.perNode, Nodes: c.Nodes, Rule: placement.RuleFor(estimator)}
}

// annotate adds what the GPU setup and the placement decided to the JSON view.
func (s *gpuSetup) annotate(o *report.Estimate, plan *placement.Plan) {
	if o.GPU != nil {
		o.GPU.Detected, o.GPU.BudgetSource = s.detected, s.budgetSource
		if s.name != "" {
			o.GPU.Name = s.name
		}
		if s.detected {
			i := s.index
			o.GPU.Index = &i
		}
		o.GPU.Count = s.listed
	}
	o.Detection = s.detection
	o.Notes = append(o.Notes, s.notes...)
	if p := plan.Placement; p != nil {
		o.Placement = report.NewPlacement(p)
		o.Verdict = report.Verdict{Fit: o.Placement.Fit, Ratio: o.Placement.Ratio, BudgetBytes: p.UsableBytes, BudgetGB: o.Placement.UsableGB,
			BudgetSource: "model-parallel placement over GPUs " + o.Placement.CUDAVisibleDevices + " (free memory, each beyond the first at 85 %)"}
	}
	if d := plan.DataParallel; d != nil {
		o.DataParallel = report.NewDataParallel(d)
	} else if plan.Placement == nil && s.listed > 1 && len(s.explicit) == 0 {
		o.Notes = append(o.Notes, fmt.Sprintf("one GPU holds the run, so the other %d listed are not used; with --strategy (ddp, fsdp_*, zero1-3) they would train data-parallel", s.listed-1))
	}
}

// printGPUSetup writes the budget, the verdict and what the GPU setup
// decided (placement, per-GPU data parallelism, notes).
func printGPUSetup(w io.Writer, o report.Estimate) {
	for _, n := range o.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if o.GPU != nil {
		name := o.GPU.Name
		if name == "" {
			name = "GPU"
		}
		if o.GPU.Index != nil {
			name = fmt.Sprintf("GPU %d %s (detected)", *o.GPU.Index, name)
		}
		if o.GPU.Count > 1 {
			name = fmt.Sprintf("%s (of %d GPUs)", name, o.GPU.Count)
		}
		budget := o.GPU.AvailableGB
		src := o.GPU.BudgetSource
		if src == "" {
			src = o.Verdict.BudgetSource
		}
		if o.Placement != nil {
			budget = o.Placement.SingleGPU.BudgetGB
		}
		fmt.Fprintf(w, "%s: %.2f GiB total (sizes the overheads), budget %.2f GiB (%s)\n", name, o.GPU.TotalGB, budget, src)
	}
	if p := o.Placement; p != nil {
		fmt.Fprintf(w, "one GPU: %s (ratio %.2f)\n", p.SingleGPU.Fit, p.SingleGPU.Ratio)
		fmt.Fprintf(w, "\nmodel-parallel placement: %s\n", p.Reason)
		fmt.Fprintf(w, "  required %.2f GiB; usable %.2f GiB (first GPU's free memory, each further GPU at %d %%); device_map %q; CUDA_VISIBLE_DEVICES=%s\n",
			p.RequiredGB, p.UsableGB, gpu.AdditionalGPUPercent, p.DeviceMap, p.CUDAVisibleDevices)
		for _, g := range p.GPUs {
			fmt.Fprintf(w, "  GPU %d  %-28s free %7.2f GiB  counted %7.2f GiB\n", g.Index, g.Name, bytesize.InGiB(g.FreeBytes), bytesize.InGiB(g.CountedBytes))
		}
		for _, g := range p.LeftOut {
			free := "unknown"
			if g.FreeBytes >= 0 {
				free = fmt.Sprintf("%.2f GiB", bytesize.InGiB(g.FreeBytes))
			}
			fmt.Fprintf(w, "  left out GPU %d (%s, free %s): %s\n", g.Index, g.Name, free, g.Reason)
		}
	}
	if o.GPU != nil || o.Placement != nil {
		fmt.Fprintf(w, "verdict: %s (ratio %.2f; yes ≤ 0.85 < marginal ≤ 0.97 < no)\n", o.Verdict.Fit, o.Verdict.Ratio)
	} else {
		fmt.Fprintln(w, "verdict: unknown — pass --gpu NAME or --gpu-vram-gb N to get one")
	}
	if d := o.DataParallel; d != nil {
		split := fmt.Sprintf("sharded over %d", d.ShardGroup)
		if d.ShardGroup == 1 {
			split = "a full replica on each"
		}
		fmt.Fprintf(w, "\ndata parallel: %s, %d node(s) × %d GPU(s) = world size %d; components above are per GPU (%s)\n", d.Strategy, d.Nodes, d.GPUsPerNode, d.WorldSize, split)
		fmt.Fprintf(w, "  with more nodes: %s\n", d.Scaling)
		if d.HostPerGPUGB > 0 {
			fmt.Fprintf(w, "  host RAM for CPU offload (%s): %.2f GiB per GPU process, %.2f GiB per node\n", d.Offload, d.HostPerGPUGB, d.HostPerNodeGB)
		}
		for _, b := range d.CommBuffers {
			fmt.Fprintf(w, "  communication: %s\n", b)
		}
	}
}
