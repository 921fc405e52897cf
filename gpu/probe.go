package gpu

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
)

// Prober finds the GPUs of a machine.
type Prober interface {
	Probe(ctx context.Context) (Inventory, error)
}

// Sentinel errors of probing; callers branch on them (doctor exits 5 on
// ErrNoGPU and 1 on the others).
var (
	// ErrNoGPU: neither nvidia-smi nor rocm-smi is installed, or the tool
	// found no device.
	ErrNoGPU = errors.New("no GPU found")
	// ErrProbeTimeout: a tool did not answer in time (a wedged driver makes
	// nvidia-smi hang for minutes).
	ErrProbeTimeout = errors.New("GPU probe timed out")
	// ErrProbeFailed: a tool ran and failed, or printed nothing usable.
	ErrProbeFailed = errors.New("GPU probe failed")
)

// DefaultProbeTimeout bounds the whole GPU probe. A healthy nvidia-smi
// answers in well under a second; 10 s leaves room for a cold driver load
// (persistence mode off) without letting a hung one hang us.
const DefaultProbeTimeout = 10 * time.Second

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

// SMIProber is the real Prober: nvidia-smi when present, else rocm-smi.
type SMIProber struct {
	// LookPath finds a program; nil means LookPathIn($PATH).
	LookPath func(string) (string, error)
	// Runner runs it; nil means ExecRunner.
	Runner Runner
	// Timeout bounds the whole probe; 0 means DefaultProbeTimeout.
	Timeout time.Duration
}

// Probe implements Prober.
func (p SMIProber) Probe(ctx context.Context) (Inventory, error) {
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
		timeout = DefaultProbeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if path, err := look("nvidia-smi"); err == nil {
		return probeNVIDIA(ctx, run, path)
	}
	if path, err := look("rocm-smi"); err == nil {
		return probeROCm(ctx, run, path)
	}
	return Inventory{}, fmt.Errorf("%w: neither nvidia-smi nor rocm-smi is on PATH", ErrNoGPU)
}

func probeNVIDIA(ctx context.Context, run Runner, path string) (Inventory, error) {
	inv := Inventory{Tool: "nvidia-smi"}
	fields := GPUQueryFields
	out, err := run.Run(ctx, path, "--query-gpu="+strings.Join(fields, ","), "--format=csv,noheader,nounits")
	if err != nil && !errors.Is(err, ErrProbeTimeout) && strings.Contains(err.Error(), "not a valid field") {
		// Drivers before 510 know neither compute_cap nor, on some, MIG.
		inv.Warnings = append(inv.Warnings, "this driver reports neither compute capability nor MIG mode: compute capability comes from the GPU table, MIG is taken as off")
		fields = LegacyGPUQueryFields
		out, err = run.Run(ctx, path, "--query-gpu="+strings.Join(fields, ","), "--format=csv,noheader,nounits")
	}
	if noDevices(out, err) {
		return inv, fmt.Errorf("%w: nvidia-smi reports no devices", ErrNoGPU)
	}
	if err != nil {
		if errors.Is(err, ErrProbeTimeout) {
			return inv, err
		}
		return inv, fmt.Errorf("%w: %w", ErrProbeFailed, err)
	}
	devs, driver, warns := ParseGPUQuery(string(out), fields)
	inv.Warnings = append(inv.Warnings, warns...)
	if len(devs) == 0 {
		return inv, fmt.Errorf("%w: nvidia-smi printed no readable GPU row: %q", ErrProbeFailed, clip(strings.TrimSpace(string(out))))
	}
	for i := range devs {
		if devs[i].ComputeCapability == "" && devs[i].Card != nil {
			devs[i].ComputeCapability = devs[i].Card.ComputeCapability
		}
	}
	inv.GPUs, inv.Driver = devs, driver

	// The rest enriches the inventory; its failure is a warning, not a failed probe.
	var apps []Process
	if out, err := run.Run(ctx, path, "--query-compute-apps="+strings.Join(AppQueryFields, ","), "--format=csv,noheader,nounits"); err != nil {
		inv.Warnings = append(inv.Warnings, fmt.Sprintf("compute process query failed: %v", err))
	} else {
		var w []string
		apps, w = ParseAppQuery(string(out), devs)
		inv.Warnings = append(inv.Warnings, w...)
	}
	var banner Banner
	if out, err := run.Run(ctx, path); err != nil {
		inv.Warnings = append(inv.Warnings, fmt.Sprintf("plain nvidia-smi (for the CUDA version and graphics processes) failed: %v", err))
	} else {
		banner = ParseBanner(string(out))
	}
	inv.CUDA = banner.CUDA
	if inv.Driver == "" {
		inv.Driver = banner.Driver
	}
	inv.Processes = mergeProcesses(banner.Processes, apps, devs)
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

func probeROCm(ctx context.Context, run Runner, path string) (Inventory, error) {
	inv := Inventory{Tool: "rocm-smi"}
	out, err := run.Run(ctx, path, ROCmArgs...)
	if err != nil {
		if errors.Is(err, ErrProbeTimeout) {
			return inv, err
		}
		return inv, fmt.Errorf("%w: %w", ErrProbeFailed, err)
	}
	devs, driver, warns, err := ParseROCmSMI(out)
	if err != nil {
		return inv, fmt.Errorf("%w: %w", ErrProbeFailed, err)
	}
	if len(devs) == 0 {
		return inv, fmt.Errorf("%w: rocm-smi lists no card", ErrNoGPU)
	}
	inv.GPUs, inv.Driver, inv.Warnings = devs, driver, warns
	for i := range inv.GPUs {
		if inv.GPUs[i].ComputeCapability == "" && inv.GPUs[i].Card != nil {
			inv.GPUs[i].ComputeCapability = inv.GPUs[i].Card.ComputeCapability
		}
	}
	return inv, nil
}

// FakeProber is a Prober for tests: it returns Inventory and Err.
type FakeProber struct {
	Inventory Inventory
	Err       error
}

// Probe implements Prober.
func (f FakeProber) Probe(context.Context) (Inventory, error) { return f.Inventory, f.Err }
