package gpu

import (
	"fmt"
	"github.com/canifinetune/canifinetune/internal/bytesize"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Severity ranks a finding.
type Severity string

// Severities, most serious first.
const (
	SeverityError   Severity = "error"   // training as set up will fail
	SeverityWarning Severity = "warning" // it will run with less than the card offers
	SeverityInfo    Severity = "info"    // worth knowing when reading an estimate
)

// Finding is one thing Diagnose found. Code is stable (scripts branch on it);
// Message and Hint are for people.
type Finding struct {
	Code     string   `json:"code"`
	Severity Severity `json:"severity"`
	// GPU is the device index the finding is about, or nil.
	GPU     *int   `json:"gpu,omitempty"`
	Message string `json:"message"`
	Hint    string `json:"hint,omitempty"`
}

// Finding codes.
const (
	CodeNoGPU              = "no-gpu"
	CodeDisplayProcess     = "display-process"
	CodeNearlyFull         = "gpu-nearly-full"
	CodeMIG                = "mig-enabled"
	CodeNotInTable         = "card-not-in-table"
	CodeNoBF16             = "no-bf16"
	CodePythonProbe        = "python-probe-failed"
	CodeTorchMissing       = "torch-missing"
	CodeTorchImport        = "torch-import-failed"
	CodeTorchNoCUDA        = "torch-without-cuda"
	CodeBnbWithoutCUDA     = "bitsandbytes-without-cuda"
	CodeTorchCUDATooNew    = "torch-cuda-newer-than-driver"
	CodeProbeWarning       = "probe-warning"
	CodeTrainingLibsAbsent = "training-libraries-missing"
)

// displayProcesses are the programs that hold GPU memory for the desktop
// rather than for training: display compositors and browsers routinely hold
// 0.5–2 GB of a consumer card (docs/memory-model.md#safety-margin).
var displayProcesses = []string{
	"xorg", "x", "xwayland", "gnome-shell", "kwin", "kwin_x11", "kwin_wayland", "plasmashell",
	"mutter", "sway", "hyprland", "weston", "compiz",
	"chrome", "google-chrome", "chromium", "chromium-browser", "firefox", "firefox-bin", "msedge",
	"microsoft-edge", "brave", "opera", "dwm.exe", "explorer.exe",
}

// isDisplayProcess matches by program base name, case-insensitively, with
// Windows' ".exe" and Chrome's helper suffixes ("chrome --type=gpu-process").
func isDisplayProcess(name string) bool {
	name = strings.TrimSpace(strings.ReplaceAll(name, `\`, "/"))
	if name == "" {
		return false
	}
	// The whole name first (a Windows path may hold spaces), then the
	// program before its arguments.
	for _, cand := range []string{name, strings.Fields(name)[0]} {
		base := strings.ToLower(filepath.Base(cand))
		if slices.Contains(displayProcesses, base) || slices.Contains(displayProcesses, strings.TrimSuffix(base, ".exe")) {
			return true
		}
	}
	return false
}

// nearlyFullFraction: a GPU whose free memory is below this share of its
// total cannot even hold seed 000's fixed allowances, the 8 % CUDA/
// fragmentation overhead plus the 5 % safety margin, both sized from the
// total; nothing is left for the model.
const nearlyFullFraction = 0.13

// Diagnose turns what a probe found into findings, most serious first. stack
// is nil when the Python stack was not probed.
func Diagnose(inv Inventory, stack *Stack) []Finding {
	var fs []Finding
	add := func(f Finding) { fs = append(fs, f) }
	if len(inv.GPUs) == 0 {
		add(Finding{Code: CodeNoGPU, Severity: SeverityError,
			Message: "No GPU found on this machine.",
			Hint:    "estimate for a card you can rent: canifinetune estimate … --gpu h100 (canifinetune gpus lists the table)"})
	}
	for _, d := range inv.GPUs {
		idx := d.Index
		gpu := &idx
		if d.MIG {
			add(Finding{Code: CodeMIG, Severity: SeverityWarning, GPU: gpu,
				Message: fmt.Sprintf("GPU %d (%s) has MIG enabled: a training process sees one MIG instance, not the card's %s.", idx, d.Name, mibString(d.TotalMiB)),
				Hint:    "estimate with the instance's memory (--gpu-vram-gb), or disable MIG: sudo nvidia-smi -i " + strconv.Itoa(idx) + " -mig 0"})
		}
		var shown []string
		var held int64
		for _, p := range inv.Processes {
			if p.GPUIndex == idx && isDisplayProcess(p.Name) {
				shown = append(shown, fmt.Sprintf("%s (%s)", filepath.Base(p.Name), mibShort(p.UsedMiB)))
				if p.UsedMiB > 0 {
					held += p.UsedMiB
				}
			}
		}
		if len(shown) > 0 {
			add(Finding{Code: CodeDisplayProcess, Severity: SeverityWarning, GPU: gpu,
				Message: fmt.Sprintf("GPU %d drives a desktop: %s hold %s that training cannot use.", idx, strings.Join(shown, ", "), mibString(held)),
				Hint:    fmt.Sprintf("estimate against what is free: --available-vram-gb %.1f --gpu-vram-gb %.1f (docs/memory-model.md#safety-margin), or close the browser / train on a GPU without a display", gib(d.FreeMiB), gib(d.TotalMiB))})
		}
		if d.TotalMiB > 0 && d.FreeMiB >= 0 && float64(d.FreeMiB) < nearlyFullFraction*float64(d.TotalMiB) {
			holders := ""
			if top := biggestHolders(inv.Processes, idx, 2); top != "" {
				holders = " Held by " + top + "."
			}
			add(Finding{Code: CodeNearlyFull, Severity: SeverityWarning, GPU: gpu,
				Message: fmt.Sprintf("GPU %d (%s) is nearly full: %s free of %s.%s", idx, d.Name, mibString(d.FreeMiB), mibString(d.TotalMiB), holders),
				Hint:    "find what holds it in the process list above; on a multi-GPU host, GPU selection takes the GPUs with the most free memory first"})
		}
		if d.Card == nil {
			add(Finding{Code: CodeNotInTable, Severity: SeverityInfo, GPU: gpu,
				Message: fmt.Sprintf("GPU %d (%s, %s) is not in the GPU table; its detected memory is used as is.", idx, d.Name, mibString(d.TotalMiB))})
		} else if !d.Card.BF16 {
			add(Finding{Code: CodeNoBF16, Severity: SeverityInfo, GPU: gpu,
				Message: fmt.Sprintf("GPU %d (%s, %s) has no native bf16: train in fp16 with loss scaling.", idx, d.Name, d.Card.Arch),
				Hint:    "use fp16 (e.g. --fp16 in the HF Trainer) and expect no FlashAttention-2"})
		}
	}
	for _, w := range inv.Warnings {
		add(Finding{Code: CodeProbeWarning, Severity: SeverityInfo, Message: w})
	}
	if stack != nil {
		fs = append(fs, diagnoseStack(inv, *stack)...)
	}
	slices.SortStableFunc(fs, func(a, b Finding) int { return severityRank(a.Severity) - severityRank(b.Severity) })
	return fs
}

func diagnoseStack(inv Inventory, s Stack) []Finding {
	var fs []Finding
	add := func(f Finding) { fs = append(fs, f) }
	if s.ProbeError != "" {
		add(Finding{Code: CodePythonProbe, Severity: SeverityWarning,
			Message: "Could not read the Python training stack: " + s.ProbeError,
			Hint:    "point at the environment you train in: canifinetune doctor --python /path/to/venv/bin/python"})
		return fs
	}
	hasGPU := len(inv.GPUs) > 0
	if !s.Has("torch") {
		add(Finding{Code: CodeTorchMissing, Severity: SeverityWarning,
			Message: fmt.Sprintf("torch is not installed in %s.", s.Python),
			Hint:    "install PyTorch for your CUDA (https://pytorch.org/get-started/locally/) or pass --python of the training environment"})
	} else if s.TorchError != "" {
		add(Finding{Code: CodeTorchImport, Severity: SeverityError,
			Message: "torch is installed but `import torch` fails: " + s.TorchError})
	} else if hasGPU && s.CUDAAvailable != nil && !*s.CUDAAvailable {
		build := "a CPU-only build"
		switch {
		case s.TorchCUDA != "":
			build = "built for CUDA " + s.TorchCUDA
		case s.TorchHIP != "":
			build = "built for ROCm " + s.TorchHIP
		}
		add(Finding{Code: CodeTorchNoCUDA, Severity: SeverityError,
			Message: fmt.Sprintf("torch %s (%s) cannot use the GPU: torch.cuda.is_available() is False.", s.Packages["torch"], build),
			Hint:    "reinstall torch for your driver's CUDA, e.g. pip install torch --index-url https://download.pytorch.org/whl/cu124"})
	}
	torchCUDA := s.CUDAAvailable != nil && *s.CUDAAvailable
	if s.Has("bitsandbytes") && !torchCUDA && (hasGPU || s.Has("torch")) {
		add(Finding{Code: CodeBnbWithoutCUDA, Severity: SeverityError,
			Message: fmt.Sprintf("bitsandbytes %s is installed but torch has no usable CUDA: QLoRA and 8-bit optimizers will fail.", s.Packages["bitsandbytes"]),
			Hint:    "install a CUDA build of torch first"})
	}
	if s.TorchCUDA != "" && inv.CUDA != "" && versionLess(inv.CUDA, s.TorchCUDA) {
		add(Finding{Code: CodeTorchCUDATooNew, Severity: SeverityWarning,
			Message: fmt.Sprintf("torch is built for CUDA %s but the driver supports up to CUDA %s.", s.TorchCUDA, inv.CUDA),
			Hint:    "update the NVIDIA driver or install a torch built for an older CUDA"})
	}
	var missing []string
	for _, p := range []string{"transformers", "peft"} {
		if !s.Has(p) {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		add(Finding{Code: CodeTrainingLibsAbsent, Severity: SeverityInfo,
			Message: fmt.Sprintf("%s not installed in %s.", strings.Join(missing, " and "), s.Python)})
	}
	return fs
}

// biggestHolders names the n processes holding the most memory on GPU idx:
// "python3 (PID 90211, 78302 MiB)".
func biggestHolders(procs []Process, idx, n int) string {
	var on []Process
	for _, p := range procs {
		if p.GPUIndex == idx && p.UsedMiB > 0 {
			on = append(on, p)
		}
	}
	slices.SortStableFunc(on, func(a, b Process) int { return int(b.UsedMiB - a.UsedMiB) })
	var parts []string
	for _, p := range on[:min(n, len(on))] {
		name := "an unnamed process"
		if f := strings.Fields(p.Name); len(f) > 0 {
			name = filepath.Base(f[0])
		}
		parts = append(parts, fmt.Sprintf("%s (PID %d, %d MiB)", name, p.PID, p.UsedMiB))
	}
	return strings.Join(parts, ", ")
}

func severityRank(s Severity) int {
	switch s {
	case SeverityError:
		return 0
	case SeverityWarning:
		return 1
	}
	return 2
}

// versionLess compares dotted versions numerically ("12.4" < "12.10").
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

func mibString(m int64) string {
	if m < 0 {
		return "an unknown amount"
	}
	return fmt.Sprintf("%d MiB (%.2f GiB)", m, gib(m))
}

func mibShort(m int64) string {
	if m < 0 {
		return "unknown memory"
	}
	return fmt.Sprintf("%d MiB", m)
}

// gib is m MiB (a count the vendor tools report) in GiB; 0 when unknown.
func gib(m int64) float64 { return bytesize.InGiB(max(m, 0) * MiB) }
