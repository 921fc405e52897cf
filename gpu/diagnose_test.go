package gpu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func probeMachine(t *testing.T, dir string) Inventory {
	t.Helper()
	r := machineRunner(t, dir)
	if dir == "legacy-470" {
		r.errs = map[string]error{"compute_cap": errors.New(`Field "compute_cap" is not a valid field to query.`)}
	}
	inv, err := SMIProber{LookPath: fakeLook("nvidia-smi"), Runner: r}.Probe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func codes(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		s := string(f.Severity) + " " + f.Code
		if f.GPU != nil {
			s += " gpu" + string(rune('0'+*f.GPU))
		}
		out = append(out, s)
	}
	return out
}

func yes() *bool { b := true; return &b }
func no() *bool  { b := false; return &b }

func TestDiagnose(t *testing.T) {
	goodStack := &Stack{Python: "/venv/bin/python", Packages: map[string]string{"torch": "2.4.0", "transformers": "4.44.0", "peft": "0.12.0", "bitsandbytes": "0.43.3"}, TorchCUDA: "12.1", CUDAAvailable: yes()}
	tests := []struct {
		name  string
		inv   Inventory
		stack *Stack
		want  []string
	}{
		{"desktop", probeMachine(t, "desktop-4090"), goodStack, []string{"warning display-process gpu0"}},
		{"one full of four", probeMachine(t, "four-a100-one-full"), goodStack, []string{"warning gpu-nearly-full gpu1"}},
		{"mig", probeMachine(t, "mig-a100"), nil, []string{"warning mig-enabled gpu0"}},
		{"v100 no bf16", probeMachine(t, "legacy-470"), nil, []string{"info no-bf16 gpu0", "info no-bf16 gpu1", "info probe-warning"}},
		{"no gpu", Inventory{}, &Stack{Python: "python3", Packages: map[string]string{"transformers": "4.44.0", "peft": "0.12"}}, []string{"error no-gpu", "warning torch-missing"}},
		{"cpu torch with bnb", probeMachine(t, "desktop-4090"),
			&Stack{Python: "p", Packages: map[string]string{"torch": "2.4.0+cpu", "bitsandbytes": "0.43.3", "transformers": "4", "peft": "0"}, CUDAAvailable: no()},
			[]string{"error torch-without-cuda", "error bitsandbytes-without-cuda", "warning display-process gpu0"}},
		{"torch newer than driver", probeMachine(t, "desktop-4090"),
			&Stack{Python: "p", Packages: map[string]string{"torch": "2.6.0", "transformers": "4", "peft": "0"}, TorchCUDA: "12.6", CUDAAvailable: yes()},
			[]string{"warning display-process gpu0", "warning torch-cuda-newer-than-driver"}},
		{"probe failed", Inventory{GPUs: []Device{{Index: 0, Name: "x", TotalMiB: 100, FreeMiB: 90}}}, &Stack{Python: "p", ProbeError: "timeout"},
			[]string{"warning python-probe-failed", "info card-not-in-table gpu0"}},
		{"no peft", probeMachine(t, "four-a100-one-full"), &Stack{Python: "p", Packages: map[string]string{"torch": "2.4"}, TorchCUDA: "12.1", CUDAAvailable: yes()},
			[]string{"warning gpu-nearly-full gpu1", "info training-libraries-missing"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Diagnose(tt.inv, tt.stack)
			if d := cmp.Diff(tt.want, codes(got)); d != "" {
				t.Errorf("findings (-want +got):\n%s\n%+v", d, got)
			}
		})
	}

	// The display finding names what holds memory and what to pass.
	fs := Diagnose(probeMachine(t, "desktop-4090"), nil)
	msg := fs[0].Message + " " + fs[0].Hint
	for _, want := range []string{"Xorg (612 MiB", "gnome-shell (187 MiB", "chrome (143 MiB", "942 MiB", "--available-vram-gb 21.3", "--gpu-vram-gb 24.0"} {
		if !strings.Contains(msg, want) {
			t.Errorf("display finding %q lacks %q", msg, want)
		}
	}
}

func TestIsDisplayProcess(t *testing.T) {
	for name, want := range map[string]bool{
		"/usr/lib/xorg/Xorg": true, "Xwayland": true, "/usr/bin/gnome-shell": true, "kwin_wayland": true,
		"/opt/google/chrome/chrome --type=gpu-process": true, `C:\Program Files\Microsoft\Edge\Application\msedge.exe`: true,
		"msedge.exe": true, "firefox": true, "python3": false, "/usr/bin/xorgish": false, "": false,
	} {
		if got := isDisplayProcess(name); got != want {
			t.Errorf("isDisplayProcess(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestParseStack(t *testing.T) {
	out := "UserWarning: something noisy\n" + `{"python_version": "3.11.4", "packages": {"torch": "2.4.0", "peft": "0.12.0", "bogus": "1", "trl": 5}, "torch_cuda": "12.1", "torch_hip": "", "cuda_available": true}` + "\n"
	s, err := ParseStack([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := Stack{PythonVersion: "3.11.4", Packages: map[string]string{"torch": "2.4.0", "peft": "0.12.0"}, TorchCUDA: "12.1", CUDAAvailable: yes()}
	if d := cmp.Diff(want, s); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if s.Has("trl") || !s.Has("peft") {
		t.Error("Has is wrong: a non-string version must count as absent")
	}
	for _, bad := range []string{"", "Traceback (most recent call last):", "[1,2]"} {
		if _, err := ParseStack([]byte(bad)); err == nil {
			t.Errorf("ParseStack(%q) succeeded", bad)
		}
	}
}

// TestPythonProber runs the real probe against a fake interpreter (a shell
// script) and, when one is installed, against a real python3: its output
// must parse and report no version for a package it lacks.
func TestPythonProber(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "python3")
	os.WriteFile(fake, []byte("#!/bin/sh\necho '{\"python_version\": \"3.12.1\", \"packages\": {\"transformers\": \"4.46.0\"}}'\n"), 0o755)
	s, err := PythonProber{Python: fake}.ProbeStack(context.Background())
	if err != nil || s.Python != fake || s.Packages["transformers"] != "4.46.0" || s.Has("torch") {
		t.Errorf("fake python: %+v, %v", s, err)
	}
	if s, err := (PythonProber{Python: filepath.Join(dir, "absent")}).ProbeStack(context.Background()); err == nil || s.ProbeError == "" {
		t.Errorf("absent python: %+v, %v", s, err)
	}
	real, err := LookPathIn(os.Getenv("PATH"))("python3")
	if err != nil {
		return
	}
	s, err = PythonProber{Python: real}.ProbeStack(context.Background())
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
