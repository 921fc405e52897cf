package gpu

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func readTestdata(t testing.TB, parts ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(append([]string{"testdata"}, parts...)...))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// devSummary is what the parser tests compare: the Card pointer is reduced
// to its name.
type devSummary struct {
	Index             int
	Name              string
	Total, Used, Free int64
	CC                string
	MIG               bool
	Card              string
}

func summarize(devs []Device) []devSummary {
	var out []devSummary
	for _, d := range devs {
		s := devSummary{d.Index, d.Name, d.TotalMiB, d.UsedMiB, d.FreeMiB, d.ComputeCapability, d.MIG, ""}
		if d.Card != nil {
			s.Card = d.Card.Name
		}
		out = append(out, s)
	}
	return out
}

func TestParseGPUQuery(t *testing.T) {
	tests := []struct {
		dir       string
		fields    []string
		want      []devSummary
		driver    string
		nWarnings int
	}{
		{"desktop-4090", GPUQueryFields, []devSummary{
			{0, "NVIDIA GeForce RTX 4090", 24564, 2381, 21787, "8.9", false, "NVIDIA GeForce RTX 4090"},
		}, "550.54.14", 0},
		{"four-a100-one-full", GPUQueryFields, []devSummary{
			{0, "NVIDIA A100-SXM4-80GB", 81920, 4, 81036, "8.0", false, "NVIDIA A100-SXM4-80GB"},
			{1, "NVIDIA A100-SXM4-80GB", 81920, 78310, 2726, "8.0", false, "NVIDIA A100-SXM4-80GB"},
			{2, "NVIDIA A100-SXM4-80GB", 81920, 20484, 60552, "8.0", false, "NVIDIA A100-SXM4-80GB"},
			{3, "NVIDIA A100-SXM4-80GB", 81920, 4, 81036, "8.0", false, "NVIDIA A100-SXM4-80GB"},
		}, "535.129.03", 0},
		{"mig-a100", GPUQueryFields, []devSummary{
			{0, "NVIDIA A100-SXM4-80GB", 81920, 13, 81036, "8.0", true, "NVIDIA A100-SXM4-80GB"},
			{1, "NVIDIA A100-SXM4-80GB", 81920, 4, 81036, "8.0", false, "NVIDIA A100-SXM4-80GB"},
		}, "550.90.07", 0},
		{"legacy-470", LegacyGPUQueryFields, []devSummary{
			{0, "Tesla V100-SXM2-16GB", 16160, 0, 16160, "", false, "Tesla V100-SXM2-16GB"},
			{1, "Tesla V100-SXM2-16GB", 16160, 1034, 15126, "", false, "Tesla V100-SXM2-16GB"},
		}, "470.82.01", 0},
		{"na-fields", GPUQueryFields, []devSummary{
			{0, "NVIDIA GeForce RTX 3060", 12288, Unknown, Unknown, "8.6", false, "NVIDIA GeForce RTX 3060"},
			// GH200 memory "[Not Supported]": unknown, yet the name alone is unique.
			{1, "NVIDIA GH200 480GB", Unknown, Unknown, Unknown, "9.0", false, "NVIDIA GH200 480GB"},
			{2, "Some Future GPU", 30000, 1000, 29000, "", false, ""},
		}, "560.94", 2}, // the garbage line and the row with memory "lots"
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			devs, driver, warns := ParseGPUQuery(readTestdata(t, tt.dir, "query-gpu.csv"), tt.fields)
			if d := cmp.Diff(tt.want, summarize(devs)); d != "" {
				t.Errorf("devices (-want +got):\n%s", d)
			}
			if driver != tt.driver {
				t.Errorf("driver = %q, want %q", driver, tt.driver)
			}
			if len(warns) != tt.nWarnings {
				t.Errorf("warnings = %q, want %d", warns, tt.nWarnings)
			}
		})
	}
}

func TestParseAppQueryAndBanner(t *testing.T) {
	devs, _, _ := ParseGPUQuery(readTestdata(t, "na-fields", "query-gpu.csv"), GPUQueryFields)
	apps, warns := ParseAppQuery(readTestdata(t, "na-fields", "apps.csv"), devs)
	want := []Process{
		{GPUIndex: 0, GPUUUID: "GPU-77aa88bb-99cc-4ddd-8eee-ffff00001111", PID: 5120, Name: `C:\Program Files\App, Inc\app.exe`, Type: "C", UsedMiB: Unknown},
		{GPUIndex: 0, GPUUUID: "GPU-77aa88bb-99cc-4ddd-8eee-ffff00001111", PID: 6001, Name: "[Insufficient Permissions]", Type: "C", UsedMiB: Unknown},
	}
	if d := cmp.Diff(want, apps); d != "" {
		t.Errorf("apps (-want +got):\n%s", d)
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "notapid") {
		t.Errorf("warnings = %q, want one about the bad pid", warns)
	}

	b := ParseBanner(readTestdata(t, "desktop-4090", "banner.txt"))
	if b.Driver != "550.54.14" || b.CUDA != "12.4" {
		t.Errorf("banner driver/CUDA = %q/%q", b.Driver, b.CUDA)
	}
	wantNames := []string{"/usr/lib/xorg/Xorg", "/usr/bin/gnome-shell", "...seed-version=20261128-050111.977000", "/opt/google/chrome/chrome", "/home/ana/venv/bin/python"}
	var names []string
	var total int64
	for _, p := range b.Processes {
		names = append(names, p.Name)
		total += p.UsedMiB
	}
	if d := cmp.Diff(wantNames, names); d != "" {
		t.Errorf("banner processes (-want +got):\n%s", d)
	}
	if total != 612+187+401+143+1024 {
		t.Errorf("banner process memory = %d MiB", total)
	}
	legacy := ParseBanner(readTestdata(t, "legacy-470", "banner.txt"))
	if legacy.CUDA != "11.4" || len(legacy.Processes) != 1 || legacy.Processes[0].GPUIndex != 1 || legacy.Processes[0].UsedMiB != 1031 {
		t.Errorf("legacy banner = %+v", legacy)
	}
	if mig := ParseBanner(readTestdata(t, "mig-a100", "banner.txt")); len(mig.Processes) != 0 {
		t.Errorf("MIG banner processes = %+v, want none (the MIG table is not a process table)", mig.Processes)
	}
	win := ParseBanner(readTestdata(t, "na-fields", "banner.txt"))
	if len(win.Processes) != 2 || win.Processes[1].Type != "C+G" || win.Processes[1].UsedMiB != Unknown {
		t.Errorf("WDDM banner = %+v", win.Processes)
	}
}

// machineInventory reads a captured machine's answers (testdata/<dir>) as
// the probe would hand them over; legacy-470's driver knows no compute_cap.
func machineInventory(t *testing.T, dir string) Inventory {
	t.Helper()
	a := NVIDIAAnswers{Fields: GPUQueryFields, GPUs: readTestdata(t, dir, "query-gpu.csv"),
		Apps: readTestdata(t, dir, "apps.csv"), Banner: readTestdata(t, dir, "banner.txt")}
	if dir == "legacy-470" {
		a.Fields = LegacyGPUQueryFields
	}
	inv, err := NVIDIAInventory(a)
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func TestNVIDIAInventory(t *testing.T) {
	inv := machineInventory(t, "desktop-4090")
	if inv.Tool != "nvidia-smi" || inv.Driver != "550.54.14" || inv.CUDA != "12.4" || len(inv.GPUs) != 1 || len(inv.Warnings) != 0 {
		t.Errorf("inventory = %+v", inv)
	}
	// The python process is in both answers and must be listed once, with
	// its UUID from the query and its type from the banner.
	var py []Process
	for _, p := range inv.Processes {
		if p.PID == 48213 {
			py = append(py, p)
		}
	}
	wantPy := []Process{{GPUIndex: 0, GPUUUID: "GPU-5f1c3a2e-8d4b-4c1e-9b7a-2e6f0d9c8a11", PID: 48213, Name: "/home/ana/venv/bin/python", Type: "C", UsedMiB: 1024}}
	if d := cmp.Diff(wantPy, py); d != "" {
		t.Errorf("merged python process (-want +got):\n%s", d)
	}
	if len(inv.Processes) != 5 {
		t.Errorf("%d processes, want 5", len(inv.Processes))
	}

	// A driver before 510 is asked without compute_cap: the capability
	// comes from the table, and the inventory says so.
	inv = machineInventory(t, "legacy-470")
	if inv.GPUs[1].ComputeCapability != "7.0" || len(inv.Warnings) != 1 || !strings.Contains(inv.Warnings[0], "compute capability comes from the GPU table") {
		t.Errorf("legacy inventory: cc %q, warnings %q", inv.GPUs[1].ComputeCapability, inv.Warnings)
	}

	// The process query and the banner enrich; their failure is a warning.
	inv, err := NVIDIAInventory(NVIDIAAnswers{Fields: GPUQueryFields, GPUs: readTestdata(t, "four-a100-one-full", "query-gpu.csv"),
		AppsErr: errors.New("boom"), BannerErr: errors.New("bang")})
	if err != nil || len(inv.GPUs) != 4 || len(inv.Warnings) != 2 || inv.CUDA != "" || !strings.Contains(inv.Warnings[0], "boom") || !strings.Contains(inv.Warnings[1], "bang") {
		t.Errorf("partial answers: %v, %+v", err, inv)
	}

	// A GPU query with no readable row is an error naming what was printed.
	if _, err := NVIDIAInventory(NVIDIAAnswers{Fields: GPUQueryFields, GPUs: "<html>"}); err == nil || !strings.Contains(err.Error(), "<html>") {
		t.Errorf("garbage: err = %v, want one quoting the output", err)
	}
}

func TestROCmInventory(t *testing.T) {
	inv, err := ROCmInventory([]byte(readTestdata(t, "rocm", "mi300x-8.json")))
	if err != nil || inv.Tool != "rocm-smi" || len(inv.GPUs) != 2 || inv.GPUs[1].FreeMiB != 196592-181248 {
		t.Errorf("rocm inventory: %v, %+v", err, inv)
	}
	if _, err := ROCmInventory([]byte("ERROR")); err == nil {
		t.Error("a malformed answer gave an inventory")
	}
}

func TestParseROCmSMI(t *testing.T) {
	tests := []struct {
		file   string
		want   []devSummary
		driver string
		warns  int
	}{
		{"mi300x-8.json", []devSummary{
			{0, "AMD Instinct MI300X OAM", 196592, 288, 196304, "gfx942", false, "AMD Instinct MI300X"},
			{1, "AMD Instinct MI300X OAM", 196592, 181248, 15344, "gfx942", false, "AMD Instinct MI300X"},
		}, "6.7.0", 0},
		{"mi250-gcds.json", []devSummary{
			{0, "AMD Instinct MI250", 65520, 10, 65510, "", false, "AMD Instinct MI250"},
			{1, "AMD Instinct MI250", 65520, 32768, 32752, "", false, "AMD Instinct MI250"},
		}, "6.2.4", 0},
		{"rx7900xtx.json", []devSummary{
			{0, "Radeon RX 7900 XTX", 24560, 1228, 23332, "", false, "AMD Radeon RX 7900 XTX"},
			{1, "Raphael", Unknown, Unknown, Unknown, "", false, ""},
		}, "6.8.5", 0},
	}
	for _, tt := range tests {
		devs, driver, warns, err := ParseROCmSMI([]byte(readTestdata(t, "rocm", tt.file)))
		if err != nil {
			t.Fatalf("%s: %v", tt.file, err)
		}
		if d := cmp.Diff(tt.want, summarize(devs)); d != "" {
			t.Errorf("%s (-want +got):\n%s", tt.file, d)
		}
		if driver != tt.driver || len(warns) != tt.warns {
			t.Errorf("%s: driver %q, warnings %q", tt.file, driver, warns)
		}
	}
	if _, _, _, err := ParseROCmSMI([]byte("WARNING: no AMD GPUs")); err == nil {
		t.Error("garbage parsed")
	}
	_, _, warns, err := ParseROCmSMI([]byte(`{"card0": 5, "cardX": {}, "card1": {"VRAM Total Memory (B)": "-3"}}`))
	if err != nil || len(warns) != 4 {
		t.Errorf("odd rocm-smi: %v, %q", err, warns)
	}
}
