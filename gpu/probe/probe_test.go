package probe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/canifinetune/canifinetune/gpu"
	"github.com/google/go-cmp/cmp"
)

// readTestdata reads a captured tool output from package gpu's testdata.
func readTestdata(t testing.TB, parts ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(append([]string{"..", "testdata"}, parts...)...))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fakeRunner answers by the first argument, like the txtar scripts' fake
// nvidia-smi.
type fakeRunner struct {
	out   map[string]string // key: first arg prefix before "=", or "" for no args
	errs  map[string]error
	calls []string
}

func (f *fakeRunner) Run(ctx context.Context, path string, args ...string) ([]byte, error) {
	key := ""
	if len(args) > 0 {
		key, _, _ = strings.Cut(args[0], "=")
	}
	f.calls = append(f.calls, key)
	if strings.Contains(strings.Join(args, " "), "compute_cap") && f.errs["compute_cap"] != nil {
		return nil, f.errs["compute_cap"]
	}
	return []byte(f.out[key]), f.errs[key]
}

func fakeLook(tools ...string) func(string) (string, error) {
	return func(name string) (string, error) {
		for _, t := range tools {
			if t == name {
				return "/fake/" + name, nil
			}
		}
		return "", fmt.Errorf("%s: not found", name)
	}
}

func machineRunner(t *testing.T, dir string) *fakeRunner {
	return &fakeRunner{out: map[string]string{
		"--query-gpu":          readTestdata(t, dir, "query-gpu.csv"),
		"--query-compute-apps": readTestdata(t, dir, "apps.csv"),
		"":                     readTestdata(t, dir, "banner.txt"),
	}}
}

func TestSMI(t *testing.T) {
	ctx := context.Background()
	inv, err := SMI{LookPath: fakeLook("nvidia-smi"), Runner: machineRunner(t, "desktop-4090")}.Probe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if inv.Tool != "nvidia-smi" || inv.Driver != "550.54.14" || inv.CUDA != "12.4" || len(inv.GPUs) != 1 {
		t.Errorf("inventory = %+v", inv)
	}
	// The python process is in both sources and must be listed once, with
	// its UUID from the query and its type from the banner.
	var py []gpu.Process
	for _, p := range inv.Processes {
		if p.PID == 48213 {
			py = append(py, p)
		}
	}
	wantPy := []gpu.Process{{GPUIndex: 0, GPUUUID: "GPU-5f1c3a2e-8d4b-4c1e-9b7a-2e6f0d9c8a11", PID: 48213, Name: "/home/ana/venv/bin/python", Type: "C", UsedMiB: 1024}}
	if d := cmp.Diff(wantPy, py); d != "" {
		t.Errorf("merged python process (-want +got):\n%s", d)
	}
	if len(inv.Processes) != 5 {
		t.Errorf("%d processes, want 5", len(inv.Processes))
	}

	// A driver before 510 rejects compute_cap: the probe retries without it
	// and takes the capability from the table.
	legacy := machineRunner(t, "legacy-470")
	legacy.errs = map[string]error{"compute_cap": errors.New(`Field "compute_cap" is not a valid field to query.`)}
	inv, err = SMI{LookPath: fakeLook("nvidia-smi"), Runner: legacy}.Probe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if inv.GPUs[1].ComputeCapability != "7.0" || len(inv.Warnings) != 1 {
		t.Errorf("legacy inventory: cc %q, warnings %q", inv.GPUs[1].ComputeCapability, inv.Warnings)
	}

	// The enrichment queries may fail without failing the probe.
	partial := machineRunner(t, "four-a100-one-full")
	partial.errs = map[string]error{"--query-compute-apps": errors.New("boom"), "": errors.New("bang")}
	inv, err = SMI{LookPath: fakeLook("nvidia-smi"), Runner: partial}.Probe(ctx)
	if err != nil || len(inv.GPUs) != 4 || len(inv.Warnings) != 2 || inv.CUDA != "" {
		t.Errorf("partial probe: %v, %+v", err, inv)
	}

	errTests := []struct {
		name   string
		look   func(string) (string, error)
		runner *fakeRunner
		want   error
	}{
		{"no tools", fakeLook(), &fakeRunner{}, gpu.ErrNoGPU},
		{"no devices", fakeLook("nvidia-smi"), &fakeRunner{
			out:  map[string]string{"--query-gpu": "No devices were found\n"},
			errs: map[string]error{"--query-gpu": errors.New("exit status 6")}}, gpu.ErrNoGPU},
		{"driver mismatch", fakeLook("nvidia-smi"), &fakeRunner{
			errs: map[string]error{"--query-gpu": errors.New("Failed to initialize NVML: Driver/library version mismatch")}}, ErrProbeFailed},
		{"garbage", fakeLook("nvidia-smi"), &fakeRunner{out: map[string]string{"--query-gpu": "<html>"}}, ErrProbeFailed},
		{"timeout", fakeLook("nvidia-smi"), &fakeRunner{errs: map[string]error{"--query-gpu": fmt.Errorf("x: %w", ErrProbeTimeout)}}, ErrProbeTimeout},
		{"rocm garbage", fakeLook("rocm-smi"), &fakeRunner{out: map[string]string{"--showmeminfo": "ERROR"}}, ErrProbeFailed},
	}
	for _, tt := range errTests {
		_, err := SMI{LookPath: tt.look, Runner: tt.runner}.Probe(ctx)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: error %v, want %v", tt.name, err, tt.want)
		}
	}

	// rocm-smi is used when nvidia-smi is absent.
	amd := &fakeRunner{out: map[string]string{"--showmeminfo": readTestdata(t, "rocm", "mi300x-8.json")}}
	inv, err = SMI{LookPath: fakeLook("rocm-smi"), Runner: amd}.Probe(ctx)
	if err != nil || inv.Tool != "rocm-smi" || len(inv.GPUs) != 2 || inv.GPUs[1].FreeMiB != 196592-181248 {
		t.Errorf("rocm probe: %v, %+v", err, inv)
	}
}

// TestExecRunnerTimeout runs a real program that hangs and checks that the
// runner returns, promptly, an ErrProbeTimeout.
func TestExecRunnerTimeout(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "nvidia-smi")
	// The child sleep holds stdout open after the shell is killed: WaitDelay
	// must still let Run return.
	if err := os.WriteFile(script, []byte("#!/bin/sh\nsleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := SMI{LookPath: LookPathIn(dir), Timeout: 200 * time.Millisecond}.Probe(context.Background())
	if !errors.Is(err, ErrProbeTimeout) {
		t.Fatalf("error = %v, want ErrProbeTimeout", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("probe took %v after a 200ms timeout", el)
	}

	fail := filepath.Join(dir, "fail")
	if err := os.WriteFile(fail, []byte("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.' >&2\nexit 9\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = ExecRunner{}.Run(context.Background(), fail)
	if err == nil || !strings.Contains(err.Error(), "could not communicate") {
		t.Errorf("error = %v, want the program's stderr", err)
	}
}

func TestLookPathIn(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "tool")
	plain := filepath.Join(dir, "plain")
	os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(plain, []byte("x"), 0o644)
	look := LookPathIn("/nonexistent" + string(filepath.ListSeparator) + dir)
	if p, err := look("tool"); err != nil || p != exe {
		t.Errorf("look(tool) = %q, %v", p, err)
	}
	if _, err := look("plain"); err == nil {
		t.Error("a non-executable file was found")
	}
}

// TestPython runs the real probe against a fake interpreter (a shell
// script) and, when one is installed, against a real python3: its output
// must parse and report no version for a package it lacks.
func TestPython(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "python3")
	os.WriteFile(fake, []byte("#!/bin/sh\necho '{\"python_version\": \"3.12.1\", \"packages\": {\"transformers\": \"4.46.0\"}}'\n"), 0o755)
	s, err := Python{Python: fake}.ProbeStack(context.Background())
	if err != nil || s.Python != fake || s.Packages["transformers"] != "4.46.0" || s.Has("torch") {
		t.Errorf("fake python: %+v, %v", s, err)
	}
	if s, err := (Python{Python: filepath.Join(dir, "absent")}).ProbeStack(context.Background()); err == nil || s.ProbeError == "" {
		t.Errorf("absent python: %+v, %v", s, err)
	}
	real, err := LookPathIn(os.Getenv("PATH"))("python3")
	if err != nil {
		return
	}
	s, err = Python{Python: real}.ProbeStack(context.Background())
	if err != nil {
		t.Fatalf("real python3 %s: %v", real, err)
	}
	if s.PythonVersion == "" {
		t.Errorf("real python3 reported no version: %+v", s)
	}
	for k, v := range s.Packages {
		if v == "" {
			t.Errorf("package %s has an empty version", k)
		}
	}
}
