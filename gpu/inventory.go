package gpu

import "errors"

// ErrNoGPU is no GPU to work with: a probe that found none (neither
// nvidia-smi nor rocm-smi is installed, or the tool lists no device), or a
// placement given no devices. Callers branch on it (doctor exits 5).
var ErrNoGPU = errors.New("no GPU found")

// Unknown is the value of a memory field the tool did not report ("[N/A]",
// "[Not Supported]"): a missing value is not zero (seed 000).
const Unknown int64 = -1

// Inventory is what a probe found on the machine.
type Inventory struct {
	// Tool is the program that answered: "nvidia-smi" or "rocm-smi".
	Tool string `json:"tool"`
	// GPUs are the devices in the tool's index order.
	GPUs []Device `json:"gpus"`
	// Driver is the driver version ("550.54.14"); empty when not reported.
	Driver string `json:"driver_version"`
	// CUDA is the highest CUDA version the driver supports, from the
	// nvidia-smi banner ("12.4"); empty when not reported or on AMD.
	CUDA string `json:"cuda_version"`
	// Processes hold GPU memory: compute processes and, from the nvidia-smi
	// banner table, graphics ones (Xorg, gnome-shell, browsers).
	Processes []Process `json:"processes"`
	// Warnings are parts of the probe that failed without failing it
	// (a garbled row, a process query that errored).
	Warnings []string `json:"warnings"`
}

// Device is one detected GPU.
type Device struct {
	// Index is the tool's index (nvidia-smi "index", rocm-smi "cardN"), the
	// number --gpus 0,2 and CUDA_VISIBLE_DEVICES use.
	Index int    `json:"index"`
	Name  string `json:"name"`
	UUID  string `json:"uuid"`
	// TotalMiB, UsedMiB and FreeMiB are in MiB; Unknown (-1) when the tool
	// reported none.
	TotalMiB int64 `json:"total_mib"`
	UsedMiB  int64 `json:"used_mib"`
	FreeMiB  int64 `json:"free_mib"`
	// ComputeCapability is "8.9" on NVIDIA, the gfx target on AMD, or "".
	ComputeCapability string `json:"compute_capability"`
	// MIG reports MIG mode enabled: the card is then split into instances and
	// no process sees its whole memory.
	MIG bool `json:"mig"`
	// Card is the matched table row (Match by name and memory), nil when the
	// card is not in the table.
	Card *Card `json:"card"`
}

// TotalBytes is the device's total memory in bytes, Unknown when unknown.
func (d Device) TotalBytes() int64 { return mibToBytes(d.TotalMiB) }

// FreeBytes is the device's currently free memory in bytes, Unknown when unknown.
func (d Device) FreeBytes() int64 { return mibToBytes(d.FreeMiB) }

// UsedBytes is the memory in use in bytes, Unknown when unknown.
func (d Device) UsedBytes() int64 { return mibToBytes(d.UsedMiB) }

func mibToBytes(m int64) int64 {
	if m < 0 {
		return Unknown
	}
	return m * MiB
}

// Process is a process holding GPU memory.
type Process struct {
	// GPUIndex is the device index, -1 when only the UUID is known.
	GPUIndex int    `json:"gpu_index"`
	GPUUUID  string `json:"gpu_uuid,omitempty"`
	PID      int    `json:"pid"`
	// Name is the process name or path as nvidia-smi prints it.
	Name string `json:"name"`
	// Type is nvidia-smi's type: "C" compute, "G" graphics, "C+G", or "" when
	// only the compute-apps query listed it (then it is "C").
	Type string `json:"type"`
	// UsedMiB is the memory it holds, Unknown when not reported (WDDM,
	// containers without the host PID namespace).
	UsedMiB int64 `json:"used_mib"`
}

// matchCards fills each device's Card from the table.
func matchCards(devs []Device) {
	for i := range devs {
		if c, ok := Match(devs[i].Name, devs[i].TotalMiB); ok {
			devs[i].Card = &c
		}
	}
}

// Device returns the device with the given index.
func (inv Inventory) Device(index int) (Device, bool) {
	for _, d := range inv.GPUs {
		if d.Index == index {
			return d, true
		}
	}
	return Device{}, false
}

// MostFree returns the device with the most free memory (ties: lowest
// index), skipping MIG-enabled devices and those whose free memory is
// unknown: the card a single-GPU `--gpu auto` plan lands on.
func (inv Inventory) MostFree() (Device, bool) {
	best, found := Device{}, false
	for _, d := range inv.GPUs {
		if ineligible(d) != "" {
			continue
		}
		if !found || d.FreeMiB > best.FreeMiB {
			best, found = d, true
		}
	}
	return best, found
}
