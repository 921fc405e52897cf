package cli

import (
	"context"
	"errors"
	"fmt"
	"github.com/canifinetune/canifinetune/internal/report"
	"io"
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

// gpuSetup is what the GPU flags and detection decided (placement.Setup),
// and what the probe found.
type gpuSetup struct {
	placement.Setup
	// detection is what the probe found, nil when it did not run.
	detection *report.Detection
}

// gpuFlags are the GPU flags estimate and plan share, once checked
// (checkMemoryFlags): 0 GiB means not given. example is the command's card
// list for the hint of --gpus beside --gpu ("4xA100-80GB").
type gpuFlags struct {
	GPU, GPUs           string
	VRAMGB, AvailableGB float64
	example             string
}

func (f gpuFlags) auto() bool  { return strings.EqualFold(f.GPU, "auto") }
func (f gpuFlags) named() bool { return f.GPU != "" && !f.auto() }

func (f gpuFlags) availableBytes() int64 { return int64(f.AvailableGB * estimate.GiB) }

// check refuses flags that contradict each other.
func (f gpuFlags) check() error {
	if f.GPUs != "" && (f.named() || f.VRAMGB > 0 || f.auto()) {
		return usageErrorf("--gpus "+f.example+"  (or --gpu a100-80gb for one card)", "--gpus %q names the GPUs already: drop --gpu / --gpu-vram-gb", f.GPUs)
	}
	if f.auto() && f.VRAMGB > 0 {
		return usageErrorf("--gpu auto  or  --gpu-vram-gb 24", "--gpu auto reads the card's memory: drop --gpu-vram-gb")
	}
	return nil
}

// resolve turns the flags, and when none names a card the detected GPUs,
// into the setup: the library decides, the flags and the probe feed it.
func (f gpuFlags) resolve(env *Env) (*gpuSetup, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	var (
		s   = &gpuSetup{Setup: placement.Setup{Index: -1}}
		err error
	)
	switch {
	case f.GPUs != "" && gpu.LooksLikeIndexList(f.GPUs):
		err = f.fromIndices(env, s)
	case f.GPUs != "":
		specs, perr := gpu.ParseGPUList(f.GPUs)
		if perr != nil {
			return nil, usageErrorf("--gpus 4xA100-80GB, --gpus 2xH100,1x4090 or --gpus 0,2 (detected indices); canifinetune gpus lists the cards", "--gpus: %v", perr)
		}
		s.Setup, err = placement.OnCardList(specs, f.availableBytes())
	case f.named() || f.VRAMGB > 0:
		var card *gpu.Card
		total := int64(f.VRAMGB * estimate.GiB)
		if f.named() {
			if f.VRAMGB > 0 {
				return nil, usageErrorf("--gpu rtx-4090  or  --gpu-vram-gb 24", "give --gpu or --gpu-vram-gb, not both")
			}
			k, lerr := gpu.Lookup(f.GPU)
			if lerr != nil {
				return nil, withHint(ExitUsage, lerr, "canifinetune gpus  (the table), or --gpu-vram-gb N")
			}
			card, total = &k, k.MemoryBytes()
		}
		s.Setup, err = placement.OnCard(card, total, f.availableBytes())
	default:
		err = f.fromDetection(env, s)
	}
	if err != nil {
		return nil, f.setupError(err)
	}
	return s, nil
}

// setupError names the flags behind an error of the library's setup.
func (f gpuFlags) setupError(err error) error {
	var (
		be *placement.BudgetError
		nr *placement.NoReadingError
		ie *placement.IndexError
	)
	switch {
	case errors.As(err, &be):
		return usageErrorf("--available-vram-gb below "+be.Of+"'s total", "--available-vram-gb %.2f exceeds %s's %.2f GiB", f.AvailableGB, be.Of, bytesize.InGiB(be.Total))
	case errors.As(err, &nr):
		return withHint(ExitError, err, "--gpu NAME or --gpu-vram-gb N --available-vram-gb N")
	case errors.As(err, &ie):
		return usageErrorf("canifinetune doctor  (lists the detected GPUs and their indices)", "--gpus %s: %v", f.GPUs, ie.Err)
	}
	return err
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

// fromDetection is --gpu auto: the probe, then placement.OnDetected. A
// probe that finds nothing leaves no budget (no verdict), and says why.
func (f gpuFlags) fromDetection(env *Env, s *gpuSetup) error {
	inv, err := detect(env, s)
	if err != nil {
		if f.AvailableGB > 0 {
			return usageErrorf("--gpu rtx-4090 --available-vram-gb 21.5", "--available-vram-gb needs the card's total too, and no GPU was detected (%s): pass --gpu or --gpu-vram-gb", s.detection.Message)
		}
		if s.detection.Status == "none" {
			s.Notes = append(s.Notes, "no GPU detected ("+s.detection.Message+"): no verdict")
		} else {
			s.Notes = append(s.Notes, "GPU detection "+s.detection.Status+" ("+s.detection.Message+"): no verdict")
		}
		return nil
	}
	s.Setup, err = placement.OnDetected(inv.GPUs, f.availableBytes())
	return err
}

// fromIndices is --gpus 0,2: detected GPUs by index, validated against the
// machine by placement.OnIndices.
func (f gpuFlags) fromIndices(env *Env, s *gpuSetup) error {
	idx, err := gpu.ParseIndexList(f.GPUs)
	if err != nil {
		return usageErrorf("--gpus 0,2  (indices as canifinetune doctor lists them)", "--gpus: %v", err)
	}
	if f.AvailableGB > 0 {
		return usageErrorf("--gpus "+f.GPUs+"  (free memory is read from the GPUs), or --gpus 2xA100-80GB --available-vram-gb 70", "--available-vram-gb does not go with detected GPUs: their free memory is measured")
	}
	inv, err := detect(env, s)
	if err != nil {
		return usageErrorf("--gpus 4xA100-80GB to plan for cards by name; canifinetune doctor shows what is detected", "--gpus %s names detected GPUs, but detection found none: %s", f.GPUs, s.detection.Message)
	}
	s.Setup, err = placement.OnIndices(inv.GPUs, idx)
	return err
}

// resolveGPUs turns the GPU flags of estimate into the setup, and sizes the
// data-parallel world of --strategy, --num-gpus and --nodes.
func (c *EstimateCmd) resolveGPUs(env *Env) (*gpuSetup, error) {
	f := gpuFlags{GPU: c.GPU, GPUs: c.GPUs, VRAMGB: c.GPUVRAMGB, AvailableGB: c.AvailableGB, example: "4xA100-80GB"}
	if err := f.check(); err != nil {
		return nil, err
	}
	if c.Nodes < 1 {
		return nil, usageErrorf("--nodes 2", "--nodes %d: a run has at least one node", c.Nodes)
	}
	if c.NumGPUs < 0 {
		return nil, usageErrorf("--num-gpus 4", "--num-gpus %d: a run has at least one GPU per node", c.NumGPUs)
	}
	s, err := f.resolve(env)
	if err != nil {
		return nil, err
	}
	if err := s.SizeWorld(c.Strategy, c.NumGPUs, c.Nodes); err != nil {
		return nil, c.worldError(f, err)
	}
	return s, nil
}

// worldError names the flags behind a world the library refused.
func (c *EstimateCmd) worldError(f gpuFlags, err error) error {
	var we *placement.WorldError
	if !errors.As(err, &we) {
		return f.setupError(err)
	}
	switch we.Reason {
	case placement.NodesWithoutDataParallel:
		return usageErrorf("--strategy fsdp_full_shard --nodes 2 --num-gpus 8", "--nodes %d needs a data-parallel --strategy: without one every GPU holds the whole run", we.Nodes)
	case placement.PerNodeDisagrees:
		return usageErrorf("--gpus "+c.GPUs+"  (without --num-gpus)", "--num-gpus %d and --gpus %s (%d GPUs) disagree: give one", we.PerNode, c.GPUs, we.Listed)
	case placement.TooFewGPUs:
		return usageErrorf("--strategy "+string(c.Strategy)+" --num-gpus 4  (or --gpus 4xA100-80GB, --nodes 2)", "--strategy %s needs at least 2 GPUs in all; have %d", c.Strategy, we.World)
	}
	return usageErrorf("--num-gpus 8 --nodes 2", "%d GPUs per node × --nodes %d: the world size must be at most %d GPUs", we.PerNode, we.Nodes, estimate.MaxGPUs)
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
