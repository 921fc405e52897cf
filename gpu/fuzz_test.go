package gpu

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// seedFiles adds every captured output named name under testdata as a seed.
func seedFiles(f *testing.F, pattern string) {
	matches, _ := filepath.Glob(filepath.Join("testdata", pattern))
	if len(matches) == 0 {
		f.Fatalf("no seeds match %s", pattern)
	}
	for _, m := range matches {
		b, err := os.ReadFile(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
}

func FuzzParseGPUQuery(f *testing.F) {
	seedFiles(f, "*/query-gpu.csv")
	f.Add("0, , , -1, 1, 2, , , \n")
	f.Fuzz(func(t *testing.T, out string) {
		devs, _, _ := ParseGPUQuery(out, GPUQueryFields)
		for _, d := range devs {
			if d.Index < 0 || d.Name == "" {
				t.Errorf("device without index or name: %+v", d)
			}
			for _, m := range []int64{d.TotalMiB, d.UsedMiB, d.FreeMiB} {
				if m < Unknown {
					t.Errorf("negative memory %d in %+v", m, d)
				}
			}
		}
	})
}

func FuzzParseAppQuery(f *testing.F) {
	seedFiles(f, "*/apps.csv")
	f.Fuzz(func(t *testing.T, out string) {
		procs, _ := ParseAppQuery(out, nil)
		for _, p := range procs {
			if p.PID < 0 || p.UsedMiB < Unknown {
				t.Errorf("bad process %+v", p)
			}
		}
	})
}

func FuzzParseBanner(f *testing.F) {
	seedFiles(f, "*/banner.txt")
	f.Fuzz(func(t *testing.T, out string) {
		b := ParseBanner(out)
		for _, p := range b.Processes {
			if p.GPUIndex < 0 || p.PID < 0 || p.UsedMiB < Unknown || strings.TrimSpace(p.Name) == "" {
				t.Errorf("bad process %+v", p)
			}
		}
	})
}

func FuzzParseROCmSMI(f *testing.F) {
	seedFiles(f, "rocm/*.json")
	f.Fuzz(func(t *testing.T, out string) {
		devs, _, _, err := ParseROCmSMI([]byte(out))
		if err != nil && len(devs) > 0 {
			t.Errorf("error %v with %d devices", err, len(devs))
		}
		for _, d := range devs {
			if d.FreeMiB > d.TotalMiB {
				t.Errorf("free > total: %+v", d)
			}
		}
	})
}

func FuzzParseStack(f *testing.F) {
	f.Add(`{"python_version": "3.11.4", "packages": {"torch": "2.4.0"}, "cuda_available": true}`)
	f.Add("noise\n{}")
	f.Fuzz(func(t *testing.T, out string) {
		s, err := ParseStack([]byte(out))
		if err != nil {
			return
		}
		for k, v := range s.Packages {
			if v == "" {
				t.Errorf("package %s with empty version", k)
			}
		}
	})
}

func FuzzLookup(f *testing.F) {
	for _, s := range []string{"rtx-4090", "4xA100-80GB", "v100", "NVIDIA H100 80GB HBM3", "", "h100 pcie", "2xH100,1x4090", "h20", "h1", "a100", "gh200 96gb", "rtx 3090 24gb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		c, err := Lookup(name)
		if err == nil && (c.MemoryMiB <= 0 || !answersTo(c, name)) {
			t.Errorf("Lookup(%q) = %+v: not one of its names", name, c)
		}
		var le *LookupError
		if err != nil && (!errors.As(err, &le) || le.Ambiguous && len(le.Candidates) < 2) {
			t.Errorf("Lookup(%q) error %v", name, err)
		}
		if specs, err := ParseGPUList(name); err == nil && TotalGPUs(specs) < 1 {
			t.Errorf("ParseGPUList(%q) = %+v", name, specs)
		}
	})
}

// answersTo reports whether name, whole, is one of c's names, aliases or
// families, possibly followed by a memory size: Lookup never completes a
// prefix.
func answersTo(c Card, name string) bool {
	keys := append(cardKeys(c), c.Families...)
	for i := range keys {
		keys[i] = normalize(keys[i])
	}
	if slices.Contains(keys, normalize(name)) {
		return true
	}
	m := sizeSuffixRE.FindStringSubmatch(strings.TrimSpace(name))
	return m != nil && slices.Contains(keys, normalize(m[1]))
}

// FuzzDiagnose feeds whatever the parsers accept to Diagnose: findings must
// come out for any inventory, never a panic.
func FuzzDiagnose(f *testing.F) {
	f.Add("0, NVIDIA A100-SXM4-80GB, GPU-a, 81920, 81000, 920, 535, 8.0, Enabled", "GPU-a, 1, , 81000")
	f.Add("0, x, GPU-b, 100, 1, 99, , , ", "GPU-b, 7, chrome, 5")
	f.Fuzz(func(t *testing.T, gpus, apps string) {
		devs, _, _ := ParseGPUQuery(gpus, GPUQueryFields)
		procs, _ := ParseAppQuery(apps, devs)
		inv := Inventory{GPUs: devs, Processes: procs}
		fs := Diagnose(inv, &Stack{Packages: map[string]string{}})
		if len(devs) == 0 && (len(fs) == 0 || fs[0].Code != CodeNoGPU) {
			t.Errorf("no devices but findings %+v", fs)
		}
	})
}
