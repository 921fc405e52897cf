package gpu

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

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
		{"desktop", machineInventory(t, "desktop-4090"), goodStack, []string{"warning display-process gpu0"}},
		{"one full of four", machineInventory(t, "four-a100-one-full"), goodStack, []string{"warning gpu-nearly-full gpu1"}},
		{"mig", machineInventory(t, "mig-a100"), nil, []string{"warning mig-enabled gpu0"}},
		{"v100 no bf16", machineInventory(t, "legacy-470"), nil, []string{"info no-bf16 gpu0", "info no-bf16 gpu1", "info probe-warning"}},
		{"no gpu", Inventory{}, &Stack{Python: "python3", Packages: map[string]string{"transformers": "4.44.0", "peft": "0.12"}}, []string{"error no-gpu", "warning torch-missing"}},
		{"cpu torch with bnb", machineInventory(t, "desktop-4090"),
			&Stack{Python: "p", Packages: map[string]string{"torch": "2.4.0+cpu", "bitsandbytes": "0.43.3", "transformers": "4", "peft": "0"}, CUDAAvailable: no()},
			[]string{"error torch-without-cuda", "error bitsandbytes-without-cuda", "warning display-process gpu0"}},
		{"torch newer than driver", machineInventory(t, "desktop-4090"),
			&Stack{Python: "p", Packages: map[string]string{"torch": "2.6.0", "transformers": "4", "peft": "0"}, TorchCUDA: "12.6", CUDAAvailable: yes()},
			[]string{"warning display-process gpu0", "warning torch-cuda-newer-than-driver"}},
		{"probe failed", Inventory{GPUs: []Device{{Index: 0, Name: "x", TotalMiB: 100, FreeMiB: 90}}}, &Stack{Python: "p", ProbeError: "timeout"},
			[]string{"warning python-probe-failed", "info card-not-in-table gpu0"}},
		{"no peft", machineInventory(t, "four-a100-one-full"), &Stack{Python: "p", Packages: map[string]string{"torch": "2.4"}, TorchCUDA: "12.1", CUDAAvailable: yes()},
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
	fs := Diagnose(machineInventory(t, "desktop-4090"), nil)
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
