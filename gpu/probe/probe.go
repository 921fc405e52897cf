package probe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/canifinetune/canifinetune/gpu"
)

// Prober finds the GPUs of a machine.
type Prober interface {
	Probe(ctx context.Context) (gpu.Inventory, error)
}

// Sentinel errors of probing; callers branch on them (doctor exits 5 on
// gpu.ErrNoGPU, which a probe returns when neither nvidia-smi nor rocm-smi
// is installed or the tool found no device, and 1 on these).
var (
	// ErrProbeTimeout: a tool did not answer in time (a wedged driver makes
	// nvidia-smi hang for minutes).
	ErrProbeTimeout = errors.New("GPU probe timed out")
	// ErrProbeFailed: a tool ran and failed, or printed nothing usable.
	ErrProbeFailed = errors.New("GPU probe failed")
)

// DefaultTimeout bounds the whole GPU probe. A healthy nvidia-smi
// answers in well under a second; 10 s leaves room for a cold driver load
// (persistence mode off) without letting a hung one hang us.
const DefaultTimeout = 10 * time.Second

// Runner runs a program and returns its standard output. A non-zero exit is
// an error that carries the program's standard error.
type Runner interface {
	Run(ctx context.Context, path string, args ...string) ([]byte, error)
}

// ExecRunner runs programs with os/exec.
type ExecRunner struct{}

// waitDelay is how long Run waits for the output pipes to close after the
// context kills the program: a killed shell script's children may hold them
// open, and Run must return anyway.
const waitDelay = 500 * time.Millisecond

// Run implements Runner. When ctx ends first the error wraps ErrProbeTimeout.
func (ExecRunner) Run(ctx context.Context, path string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = waitDelay
	err := cmd.Run()
	if ctx.Err() != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s: %w (%v)", filepath.Base(path), strings.Join(args, " "), ErrProbeTimeout, context.Cause(ctx))
	}
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return stdout.Bytes(), fmt.Errorf("%s %s: %w: %s", filepath.Base(path), strings.Join(args, " "), err, clip(msg))
	}
	return stdout.Bytes(), nil
}

// LookPathIn returns a lookup of executables in the directories of pathList
// (a PATH-style list), so that a caller decides which PATH counts rather than
// the process environment.
func LookPathIn(pathList string) func(string) (string, error) {
	return func(name string) (string, error) {
		for _, dir := range filepath.SplitList(pathList) {
			if dir == "" {
				continue
			}
			p := filepath.Join(dir, name)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				return p, nil
			}
		}
		return "", fmt.Errorf("%s: %w", name, exec.ErrNotFound)
	}
}

// SMI is the real Prober: nvidia-smi when present, else rocm-smi.
type SMI struct {
	// LookPath finds a program; nil means LookPathIn($PATH).
	LookPath func(string) (string, error)
	// Runner runs it; nil means ExecRunner.
	Runner Runner
	// Timeout bounds the whole probe; 0 means DefaultTimeout.
	Timeout time.Duration
}

// Probe implements Prober.
func (p SMI) Probe(ctx context.Context) (gpu.Inventory, error) {
	look := p.LookPath
	if look == nil {
		look = LookPathIn(os.Getenv("PATH"))
	}
	run := p.Runner
	if run == nil {
		run = ExecRunner{}
	}
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if path, err := look("nvidia-smi"); err == nil {
		return probeNVIDIA(ctx, run, path)
	}
	if path, err := look("rocm-smi"); err == nil {
		return probeROCm(ctx, run, path)
	}
	return gpu.Inventory{}, fmt.Errorf("%w: neither nvidia-smi nor rocm-smi is on PATH", gpu.ErrNoGPU)
}

// probeNVIDIA asks nvidia-smi the three questions of gpu.NVIDIAAnswers,
// retrying the GPU query without the fields a driver before 510 rejects.
func probeNVIDIA(ctx context.Context, run Runner, path string) (gpu.Inventory, error) {
	a := gpu.NVIDIAAnswers{Fields: gpu.GPUQueryFields}
	out, err := run.Run(ctx, path, "--query-gpu="+strings.Join(a.Fields, ","), "--format=csv,noheader,nounits")
	if err != nil && !errors.Is(err, ErrProbeTimeout) && strings.Contains(err.Error(), "not a valid field") {
		a.Fields = gpu.LegacyGPUQueryFields
		out, err = run.Run(ctx, path, "--query-gpu="+strings.Join(a.Fields, ","), "--format=csv,noheader,nounits")
	}
	inv := gpu.Inventory{Tool: "nvidia-smi"}
	if noDevices(out, err) {
		return inv, fmt.Errorf("%w: nvidia-smi reports no devices", gpu.ErrNoGPU)
	}
	if err != nil {
		if errors.Is(err, ErrProbeTimeout) {
			return inv, err
		}
		return inv, fmt.Errorf("%w: %w", ErrProbeFailed, err)
	}
	a.GPUs = string(out)
	// The rest enriches the inventory; its failure is a warning, not a failed probe.
	out, a.AppsErr = run.Run(ctx, path, "--query-compute-apps="+strings.Join(gpu.AppQueryFields, ","), "--format=csv,noheader,nounits")
	a.Apps = string(out)
	out, a.BannerErr = run.Run(ctx, path)
	a.Banner = string(out)
	inv, err = gpu.NVIDIAInventory(a)
	if err != nil {
		return inv, fmt.Errorf("%w: %w", ErrProbeFailed, err)
	}
	return inv, nil
}

// noDevices recognises nvidia-smi's answer on a machine whose driver is
// installed but sees no GPU (exit status 6 or 9, "No devices were found").
func noDevices(out []byte, err error) bool {
	s := string(out)
	if err != nil {
		s += err.Error()
	}
	return strings.Contains(s, "No devices were found") || strings.Contains(s, "No NVIDIA GPU found")
}

func probeROCm(ctx context.Context, run Runner, path string) (gpu.Inventory, error) {
	out, err := run.Run(ctx, path, gpu.ROCmArgs...)
	if err != nil {
		if errors.Is(err, ErrProbeTimeout) {
			return gpu.Inventory{Tool: "rocm-smi"}, err
		}
		return gpu.Inventory{Tool: "rocm-smi"}, fmt.Errorf("%w: %w", ErrProbeFailed, err)
	}
	inv, err := gpu.ROCmInventory(out)
	if err != nil {
		return inv, fmt.Errorf("%w: %w", ErrProbeFailed, err)
	}
	if len(inv.GPUs) == 0 {
		return inv, fmt.Errorf("%w: rocm-smi lists no card", gpu.ErrNoGPU)
	}
	return inv, nil
}

// Fake is a Prober for tests: it returns Inventory and Err.
type Fake struct {
	Inventory gpu.Inventory
	Err       error
}

// Probe implements Prober.
func (f Fake) Probe(context.Context) (gpu.Inventory, error) { return f.Inventory, f.Err }

// clip shortens a tool's output for an error message.
func clip(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}
