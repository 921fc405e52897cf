package gpu

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCardsTable checks the embedded table's invariants: every row has a
// source, a plausible memory reading, a vendor and an arch; every alias names
// exactly one card (else Lookup would call it ambiguous); and the readings the
// issue quotes are there.
func TestCardsTable(t *testing.T) {
	cards := Cards()
	if len(cards) < 45 {
		t.Fatalf("table has %d cards, want the ≥ 45 of issue 2", len(cards))
	}
	for _, c := range cards {
		if c.Source == "" || c.Vendor != "nvidia" && c.Vendor != "amd" || c.Arch == "" || c.ComputeCapability == "" {
			t.Errorf("%s: incomplete row %+v", c.Name, c)
		}
		if c.MemoryMiB < 4096 || c.MemoryMiB > 300_000 {
			t.Errorf("%s: memory %d MiB is implausible", c.Name, c.MemoryMiB)
		}
		if c.Nominal != strings.Contains(c.Source, "nominal") {
			t.Errorf("%s: nominal=%v but source %q", c.Name, c.Nominal, c.Source)
		}
		for _, a := range append([]string{c.Name}, c.Aliases...) {
			got, err := Lookup(a)
			if err != nil || got.Name != c.Name {
				t.Errorf("Lookup(%q) = %q, %v; want %q", a, got.Name, err, c.Name)
			}
		}
	}
	want := map[string]int64{
		"NVIDIA GeForce RTX 4090": 24564,
		"NVIDIA A100-SXM4-80GB":   81920,
		"NVIDIA H100 80GB HBM3":   81559,
		"NVIDIA H200":             143771,
	}
	for name, mib := range want {
		c, err := Lookup(name)
		if err != nil || c.MemoryMiB != mib {
			t.Errorf("%s: %d MiB, %v; want %d (issue 5)", name, c.MemoryMiB, err, mib)
		}
	}
	if got := (Card{MemoryMiB: 24564}).MemoryBytes(); got != 24564*1048576 {
		t.Errorf("MemoryBytes = %d", got)
	}
}

func TestLookup(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"rtx-4090", "NVIDIA GeForce RTX 4090"},
		{"4090", "NVIDIA GeForce RTX 4090"},
		{"RTX 4090", "NVIDIA GeForce RTX 4090"},
		{"NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"},
		{"A100-80GB", "NVIDIA A100-SXM4-80GB"},
		{"a100", "NVIDIA A100-SXM4-80GB"},
		{"A100 80GB PCIe", "NVIDIA A100 80GB PCIe"},
		{"h100", "NVIDIA H100 80GB HBM3"},
		{"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"},
		{"h100 80gb", "NVIDIA H100 80GB HBM3"}, // family + size prefix, one candidate
		{"H100-PCIe", "NVIDIA H100 PCIe"},
		{"a10", "NVIDIA A10"}, // exact beats prefix of a100
		{"l40s", "NVIDIA L40S"},
		{"a6000", "NVIDIA RTX A6000"},
		{"Tesla T4", "Tesla T4"},
		{"t4", "Tesla T4"},
		{"4060 Ti 16GB", "NVIDIA GeForce RTX 4060 Ti"},
		{"rtx 3060 12gb", "NVIDIA GeForce RTX 3060"},
		{"mi300x", "AMD Instinct MI300X"},
		{"Instinct MI210", "AMD Instinct MI210"},
		{"Radeon RX 7900 XTX", "AMD Radeon RX 7900 XTX"},
		{"7900xtx", "AMD Radeon RX 7900 XTX"},
		{"RTX 3090 24GB", "NVIDIA GeForce RTX 3090"}, // name + its size
		{"H200 141GB", "NVIDIA H200"},                // marketing size, 143771 MiB reading
		{"V100 32GB", "Tesla V100-SXM2-32GB"},        // size picks the variant
		{"h100-sxm5-80gb", "NVIDIA H100 80GB HBM3"},
	}
	for _, tt := range tests {
		got, err := Lookup(tt.in)
		if err != nil {
			t.Errorf("Lookup(%q): %v", tt.in, err)
			continue
		}
		if got.Name != tt.want {
			t.Errorf("Lookup(%q) = %q, want %q", tt.in, got.Name, tt.want)
		}
	}
}

func TestLookupErrors(t *testing.T) {
	tests := []struct {
		in       string
		sentinel error
		contains []string
	}{
		{"v100", ErrAmbiguousGPU, []string{"Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB"}},
		{"a100 pcie", ErrAmbiguousGPU, []string{"A100-PCIE-40GB", "A100 80GB PCIe"}},
		{"rtx 4095", ErrUnknownGPU, []string{"did you mean", "RTX 4090"}},
		{"4060", ErrUnknownGPU, []string{"RTX 4060 Ti"}}, // the 8 GB 4060 is not in the table: suggest, never substitute
		{"4060 Ti 8GB", ErrUnknownGPU, []string{"has 16380 MiB, not 8 GB"}},
		{"", ErrUnknownGPU, nil},
		{"banana", ErrUnknownGPU, []string{"canifinetune gpus"}},
	}
	for _, tt := range tests {
		_, err := Lookup(tt.in)
		if !errors.Is(err, tt.sentinel) {
			t.Errorf("Lookup(%q) error = %v, want %v", tt.in, err, tt.sentinel)
			continue
		}
		for _, c := range tt.contains {
			if !strings.Contains(err.Error(), c) {
				t.Errorf("Lookup(%q) error %q lacks %q", tt.in, err, c)
			}
		}
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		name  string
		mib   int64
		want  string
		found bool
	}{
		{"NVIDIA GeForce RTX 4090", 24564, "NVIDIA GeForce RTX 4090", true},
		{"Tesla V100-SXM2-16GB", 16160, "Tesla V100-SXM2-16GB", true},   // older driver, within 5 %
		{"NVIDIA GeForce RTX 4060 Ti", 8188, "", false},                 // the 8 GB model is not in the table
		{"NVIDIA GeForce RTX 4060 Laptop GPU", 8188, "", false},         // unknown name
		{"NVIDIA A100-PCIE-40GB", 40536, "NVIDIA A100-PCIE-40GB", true}, // older driver
		{"v100", 32510, "Tesla V100-SXM2-32GB", true},                   // ambiguous name, memory decides
		{"v100", 0, "", false}, // ambiguous and no memory: refuse
		{"NVIDIA H100 80GB HBM3", 0, "NVIDIA H100 80GB HBM3", true}, // unknown memory, unique name
	}
	for _, tt := range tests {
		got, ok := Match(tt.name, tt.mib)
		if ok != tt.found || got.Name != tt.want {
			t.Errorf("Match(%q, %d) = %q, %v; want %q, %v", tt.name, tt.mib, got.Name, ok, tt.want, tt.found)
		}
	}
}

func TestParseGPUList(t *testing.T) {
	type row struct {
		Count int
		Name  string
	}
	tests := []struct {
		in   string
		want []row
	}{
		{"4xA100-80GB", []row{{4, "NVIDIA A100-SXM4-80GB"}}},
		{"2xH100,1x4090", []row{{2, "NVIDIA H100 80GB HBM3"}, {1, "NVIDIA GeForce RTX 4090"}}},
		{"8 × h200", []row{{8, "NVIDIA H200"}}},
		{"rtx-4090", []row{{1, "NVIDIA GeForce RTX 4090"}}},
		{"4090", []row{{1, "NVIDIA GeForce RTX 4090"}}}, // a leading number without "x" is a name
		{"2*mi300x, 3060-12gb", []row{{2, "AMD Instinct MI300X"}, {1, "NVIDIA GeForce RTX 3060"}}},
	}
	for _, tt := range tests {
		specs, err := ParseGPUList(tt.in)
		if err != nil {
			t.Errorf("ParseGPUList(%q): %v", tt.in, err)
			continue
		}
		var got []row
		for _, s := range specs {
			got = append(got, row{s.Count, s.Card.Name})
		}
		if d := cmp.Diff(tt.want, got); d != "" {
			t.Errorf("ParseGPUList(%q) (-want +got):\n%s", tt.in, d)
		}
	}
	if n := TotalGPUs(mustList(t, "2xH100,1x4090")); n != 3 {
		t.Errorf("TotalGPUs = %d, want 3", n)
	}
	for _, bad := range []string{"", "0xA100", "4x", "2xH100,,1x4090", "4xbanana", "5000xA100", "v100"} {
		if _, err := ParseGPUList(bad); err == nil {
			t.Errorf("ParseGPUList(%q) succeeded, want an error", bad)
		}
	}
}

func mustList(t *testing.T, s string) []GPUSpec {
	t.Helper()
	l, err := ParseGPUList(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestIndexList(t *testing.T) {
	if got, err := ParseIndexList("0, 2"); err != nil || !cmp.Equal(got, []int{0, 2}) {
		t.Errorf("ParseIndexList = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0,0", "-1", "a", "1,"} {
		if _, err := ParseIndexList(bad); err == nil {
			t.Errorf("ParseIndexList(%q) succeeded", bad)
		}
	}
	for s, want := range map[string]bool{"0,2": true, "3": true, "4xA100": false, "4090x": false, "": false, "a100": false, "4090": false, "0,1,2,3": true} {
		if got := LooksLikeIndexList(s); got != want {
			t.Errorf("LooksLikeIndexList(%q) = %v", s, got)
		}
	}
}
