package gpu

import (
	"fmt"
	"github.com/canifinetune/canifinetune/internal/bytesize"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// AdditionalGPUPercent is the share of its free memory each GPU beyond the
// first adds to the usable pool when a model is split across GPUs. Seed 001
// (unsloth studio's VRAM_ESTIMATION.md §8, "Multi-GPU Overhead"): "each
// additional GPU (beyond the first) contributes only 85% of its free VRAM to
// the usable pool. The 15% discount accounts for NCCL all-reduce buffers,
// PCIe/NVLink transfer overhead, synchronization barriers, and memory
// fragmentation from non-uniform shard sizes":
//
//	usable = free[gpu_0] + Σ free[gpu_i] × 0.85, i ≥ 1
const AdditionalGPUPercent = 85

// Device maps, as Hugging Face accelerate names them; seed 001's
// get_device_map: "balanced" if more than one GPU, "sequential" otherwise.
const (
	DeviceMapBalanced   = "balanced"
	DeviceMapSequential = "sequential"
)

// Selection is the outcome of choosing GPUs for a model that is placed
// across them (model parallel, seed 001).
type Selection struct {
	// RequiredBytes is what the placement must hold.
	RequiredBytes int64 `json:"required_bytes"`
	// UsableBytes is the pool of the chosen GPUs, each beyond the first
	// counted at AdditionalGPUPercent of its free memory.
	UsableBytes int64 `json:"usable_bytes"`
	// Fits reports UsableBytes ≥ RequiredBytes.
	Fits bool `json:"fits"`
	// GPUs are the chosen devices in the order they were added.
	GPUs []SelectedGPU `json:"gpus"`
	// DeviceMap is "balanced" for more than one GPU, "sequential" otherwise.
	DeviceMap string `json:"device_map"`
	// LeftOut are the devices not chosen, each with why.
	LeftOut []LeftOutGPU `json:"left_out"`
	// Explicit reports that the user named the GPUs (--gpus 0,2).
	Explicit bool `json:"explicit"`
}

// Indices are the chosen device indices in order, ready for
// CUDA_VISIBLE_DEVICES.
func (s Selection) Indices() []int {
	out := make([]int, len(s.GPUs))
	for i, g := range s.GPUs {
		out[i] = g.Index
	}
	return out
}

// SelectedGPU is a chosen device and what it adds to the pool.
type SelectedGPU struct {
	Index     int    `json:"index"`
	Name      string `json:"name"`
	FreeBytes int64  `json:"free_bytes"`
	// CountedBytes is FreeBytes for the first GPU and 85 % of it for the others.
	CountedBytes int64 `json:"counted_bytes"`
}

// LeftOutGPU is a device that was not chosen.
type LeftOutGPU struct {
	Index     int    `json:"index"`
	Name      string `json:"name"`
	FreeBytes int64  `json:"free_bytes"`
	Reason    string `json:"reason"`
}

// ineligible says why a device cannot take part in a placement, or "".
func ineligible(d Device) string {
	switch {
	case d.MIG:
		return "MIG is enabled: no process sees the whole card"
	case d.FreeMiB < 0:
		return "its free memory is unknown (the driver reported none)"
	case d.FreeMiB == 0:
		return "it has no free memory"
	}
	return ""
}

func counted(free int64, position int) int64 {
	if position == 0 {
		return free
	}
	return free * AdditionalGPUPercent / 100
}

// SelectGPUs chooses GPUs for a placement needing requiredBytes, seed 001's
// auto_select_gpu_ids: rank the eligible devices by free memory (ties by
// index) and add them until the pool, each GPU beyond the first counted at
// 85 %, covers the requirement. When even all of them fall short, all are
// chosen and Fits is false. Devices with MIG enabled or unknown free memory
// are left out with the reason.
func SelectGPUs(requiredBytes int64, devices []Device) (Selection, error) {
	if requiredBytes <= 0 {
		return Selection{}, fmt.Errorf("select GPUs: required memory %d bytes must be positive", requiredBytes)
	}
	if len(devices) == 0 {
		return Selection{}, fmt.Errorf("select GPUs: %w", ErrNoGPU)
	}
	sel := Selection{RequiredBytes: requiredBytes}
	var eligible []Device
	for _, d := range devices {
		if why := ineligible(d); why != "" {
			sel.LeftOut = append(sel.LeftOut, LeftOutGPU{Index: d.Index, Name: d.Name, FreeBytes: d.FreeBytes(), Reason: why})
			continue
		}
		eligible = append(eligible, d)
	}
	sort.SliceStable(eligible, func(a, b int) bool {
		if eligible[a].FreeMiB != eligible[b].FreeMiB {
			return eligible[a].FreeMiB > eligible[b].FreeMiB
		}
		return eligible[a].Index < eligible[b].Index
	})
	n := 0
	for n < len(eligible) && sel.UsableBytes < requiredBytes {
		sel.add(eligible[n])
		n++
	}
	chosen := "GPU " + joinInts(sel.Indices())
	if len(sel.GPUs) > 1 {
		chosen = "GPUs " + joinInts(sel.Indices())
	}
	for _, d := range eligible[n:] {
		sel.LeftOut = append(sel.LeftOut, LeftOutGPU{Index: d.Index, Name: d.Name, FreeBytes: d.FreeBytes(),
			Reason: fmt.Sprintf("not needed: %s, with more free memory, already cover the %s required", chosen, bytesize.Format(requiredBytes))})
	}
	sel.finish()
	sortLeftOut(sel.LeftOut)
	return sel, nil
}

// SelectExplicit is the placement across the GPUs the user named (--gpus
// 0,2), seed 001's resolve_requested_gpu_ids: every index must be a detected
// device; all named GPUs are used, in the order given, and Fits says whether
// they hold requiredBytes (0 when unknown: Fits is then true).
func SelectExplicit(indices []int, requiredBytes int64, devices []Device) (Selection, error) {
	if requiredBytes < 0 {
		return Selection{}, fmt.Errorf("select GPUs: required memory %d bytes must not be negative", requiredBytes)
	}
	if len(indices) == 0 {
		return Selection{}, fmt.Errorf("select GPUs: no GPU index given")
	}
	byIndex := map[int]Device{}
	var known []int
	for _, d := range devices {
		byIndex[d.Index] = d
		known = append(known, d.Index)
	}
	sel := Selection{RequiredBytes: requiredBytes, Explicit: true}
	for i, idx := range indices {
		if slices.Contains(indices[:i], idx) {
			return Selection{}, fmt.Errorf("GPU %d is named twice in --gpus", idx)
		}
		d, ok := byIndex[idx]
		if !ok {
			if len(known) == 0 {
				return Selection{}, fmt.Errorf("GPU %d: %w", idx, ErrNoGPU)
			}
			return Selection{}, fmt.Errorf("GPU %d is not on this machine; detected GPUs: %s", idx, joinInts(known))
		}
		if why := ineligible(d); why != "" {
			return Selection{}, fmt.Errorf("GPU %d (%s) cannot be used: %s", idx, d.Name, why)
		}
		sel.add(d)
	}
	for _, d := range devices {
		if !slices.Contains(indices, d.Index) {
			sel.LeftOut = append(sel.LeftOut, LeftOutGPU{Index: d.Index, Name: d.Name, FreeBytes: d.FreeBytes(), Reason: "not named in --gpus"})
		}
	}
	sel.finish()
	sortLeftOut(sel.LeftOut)
	return sel, nil
}

func (s *Selection) add(d Device) {
	free := d.FreeBytes()
	c := counted(free, len(s.GPUs))
	s.GPUs = append(s.GPUs, SelectedGPU{Index: d.Index, Name: d.Name, FreeBytes: free, CountedBytes: c})
	s.UsableBytes += c
}

func (s *Selection) finish() {
	s.Fits = s.UsableBytes >= s.RequiredBytes
	s.DeviceMap = DeviceMapSequential
	if len(s.GPUs) > 1 {
		s.DeviceMap = DeviceMapBalanced
	}
	if s.LeftOut == nil {
		s.LeftOut = []LeftOutGPU{}
	}
}

func sortLeftOut(l []LeftOutGPU) {
	sort.SliceStable(l, func(a, b int) bool { return l[a].Index < l[b].Index })
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
