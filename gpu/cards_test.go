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
	if len(cards) < 60 {
		t.Fatalf("table has %d cards, want ≥ 60", len(cards))
	}
	for _, c := range cards {
		if c.Source == "" || c.Vendor != "nvidia" && c.Vendor != "amd" || c.Arch == "" || c.ComputeCapability == "" {
			t.Errorf("%s: incomplete row %+v", c.Name, c)
		}
		if !namesDocument(c.Source) {
			t.Errorf("%s: source %q names no datasheet, specification page or other document a user can open", c.Name, c.Source)
		}
		if strings.Contains(c.Source, "code-search") {
			t.Errorf("%s: source %q cites an internal search id", c.Name, c.Source)
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
		"NVIDIA H20":              97871, // 96 GB, not the H200's 141
		"NVIDIA H800":             81559,
		"NVIDIA A800-SXM4-80GB":   81920,
		"Tesla P100-PCIE-16GB":    16384,
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
		// Whole names only: h20 is the 96 GB H20, never completed to H200.
		{"h20", "NVIDIA H20"},
		{"H20", "NVIDIA H20"},
		{"NVIDIA H20", "NVIDIA H20"},
		{"h20-3e", "NVIDIA H20-3e"},
		{"h200", "NVIDIA H200"},
		{"H100 SXM", "NVIDIA H100 80GB HBM3"},
		{"H100 PCIe", "NVIDIA H100 PCIe"},
		{"h100 nvl", "NVIDIA H100 NVL"},
		{"h800", "NVIDIA H800"},
		{"a800-80gb", "NVIDIA A800-SXM4-80GB"},
		{"rtx4090", "NVIDIA GeForce RTX 4090"},
		{"RTX-4090", "NVIDIA GeForce RTX 4090"},
		{"3080 ti", "NVIDIA GeForce RTX 3080 Ti"},
		{"3080", "NVIDIA GeForce RTX 3080"},
		{"4070 super", "NVIDIA GeForce RTX 4070 SUPER"},
		{"4070 ti", "NVIDIA GeForce RTX 4070 Ti"},
		{"4070", "NVIDIA GeForce RTX 4070"},
		{"rtx pro 6000", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"},
		{"p40", "Tesla P40"},
		{"p100 16gb", "Tesla P100-PCIE-16GB"},
		{"gh200 96gb", "NVIDIA GH200 480GB"}, // family + size picks the variant
		{"A100 40GB", "NVIDIA A100-SXM4-40GB"},
		{"a100 pcie 80gb", "NVIDIA A100 80GB PCIe"},
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
		// No prefix completes to a card: h1 is not the H100, h2 not the H20 or H200.
		{"h1", ErrUnknownGPU, []string{`did you mean "NVIDIA H100 PCIe" (h100-pcie), "NVIDIA H100 80GB HBM3" (h100) or "NVIDIA H100 NVL" (h100-nvl)?`, "canifinetune gpus"}},
		{"h2", ErrUnknownGPU, []string{"did you mean", "H20", "H200"}},
		{"a1", ErrUnknownGPU, nil},
		{"rtx 6000", ErrUnknownGPU, []string{"RTX 6000 Ada Generation"}},
		{"a800", ErrUnknownGPU, []string{"A800-SXM4-80GB"}}, // a 40 GB A800 exists: suggest, never pick
		{"p100", ErrUnknownGPU, []string{"P100-PCIE-16GB"}},
		// Family names shared by variants of other memory are ambiguous.
		{"a100", ErrAmbiguousGPU, []string{`it could be "NVIDIA A100-PCIE-40GB" (a100-40gb-pcie), "NVIDIA A100-SXM4-40GB" (a100-40gb), "NVIDIA A100 80GB PCIe" (a100-80gb-pcie) or "NVIDIA A100-SXM4-80GB" (a100-80gb); name one of them`}},
		{"A100-SXM", ErrAmbiguousGPU, []string{"A100-SXM4-40GB", "A100-SXM4-80GB"}},
		{"gh200", ErrAmbiguousGPU, []string{"GH200 480GB", "GH200 144G HBM3e"}},
		{"v100 pcie", ErrAmbiguousGPU, []string{"V100-SXM2-16GB", "V100-SXM2-32GB"}},
		{"gh200 80gb", ErrUnknownGPU, []string{"has 97871 MiB", "has 146831 MiB", "not 80 GB"}},
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
		{"NVIDIA H20", 97871, "NVIDIA H20", true},
		{"NVIDIA H20-3e", 143771, "NVIDIA H20-3e", true},
		{"NVIDIA H2", 97871, "", false},                             // no prefix matching for detected names either
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
		{"4xh20", []row{{4, "NVIDIA H20"}}},
		{"8xH100 SXM,2xH100 PCIe", []row{{8, "NVIDIA H100 80GB HBM3"}, {2, "NVIDIA H100 PCIe"}}},
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
	for _, bad := range []string{"", "0xA100", "4x", "2xH100,,1x4090", "4xbanana", "5000xA100", "v100", "4xA100", "2xh1", "8xh2"} {
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

// namesDocument reports whether a source names something a user can open:
// a vendor datasheet, specification or product page, or a URL.
func namesDocument(src string) bool {
	for _, w := range []string{"datasheet", "data sheet", "specifications page", "product page", "product brief", "instance page", "https://"} {
		if strings.Contains(src, w) {
			return true
		}
	}
	return false
}

// TestLookupErrorType checks the structured error: the candidates a caller
// (the web page, a planner) can offer without parsing the message.
func TestLookupErrorType(t *testing.T) {
	names := func(cs []Card) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}
	tests := []struct {
		in        string
		ambiguous bool
		want      []string
	}{
		{"a100", true, []string{"NVIDIA A100-PCIE-40GB", "NVIDIA A100-SXM4-40GB", "NVIDIA A100 80GB PCIe", "NVIDIA A100-SXM4-80GB"}},
		{"a100-pcie", true, []string{"NVIDIA A100-PCIE-40GB", "NVIDIA A100 80GB PCIe"}},
		{"v100", true, []string{"Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB"}},
		{"h1", false, []string{"NVIDIA H100 PCIe", "NVIDIA H100 80GB HBM3", "NVIDIA H100 NVL"}},
		{"rtx 4095", false, []string{"NVIDIA GeForce RTX 4090"}},
		{"zzzzzzzz", false, nil},
	}
	for _, tt := range tests {
		_, err := Lookup(tt.in)
		var le *LookupError
		if !errors.As(err, &le) {
			t.Errorf("Lookup(%q) error %v is not a *LookupError", tt.in, err)
			continue
		}
		if le.Name != tt.in || le.Ambiguous != tt.ambiguous {
			t.Errorf("Lookup(%q): Name %q Ambiguous %v, want %q %v", tt.in, le.Name, le.Ambiguous, tt.in, tt.ambiguous)
		}
		if d := cmp.Diff(tt.want, names(le.Candidates)); d != "" {
			t.Errorf("Lookup(%q) candidates (-want +got):\n%s", tt.in, d)
		}
	}
	// Through ParseGPUList the error is still there to unwrap.
	_, err := ParseGPUList("2xa100")
	var le *LookupError
	if !errors.As(err, &le) || !le.Ambiguous || !errors.Is(err, ErrAmbiguousGPU) {
		t.Errorf("ParseGPUList(2xa100) error %v, want an ambiguous *LookupError", err)
	}
}

// TestFamilies checks each family name: shared by at least two cards, every
// member answers to it, and Lookup lists exactly its members.
func TestFamilies(t *testing.T) {
	members := map[string][]string{}
	for _, c := range Cards() {
		for _, f := range c.Families {
			members[normalize(f)] = append(members[normalize(f)], c.Name)
		}
	}
	if len(members) == 0 {
		t.Fatal("no families in the table")
	}
	for f, want := range members {
		_, err := Lookup(f)
		var le *LookupError
		if !errors.As(err, &le) || !le.Ambiguous {
			t.Errorf("Lookup(%q) = %v, want ambiguous", f, err)
			continue
		}
		var got []string
		for _, c := range le.Candidates {
			got = append(got, c.Name)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("family %q (-want +got):\n%s", f, d)
		}
	}
}

// TestLoadTableRejects checks that the table's own mistakes fail loading
// (and so TestCardsTable) rather than making lookups guess.
func TestLoadTableRejects(t *testing.T) {
	row := func(name, alias, family string) string {
		fam := ""
		if family != "" {
			fam = `, "families": ["` + family + `"]`
		}
		return `{"name": "` + name + `", "aliases": ["` + alias + `"]` + fam + `, "memory_mib": 1024, "source": "x datasheet"}`
	}
	for name, data := range map[string]string{
		"alias on two cards":   "[" + row("A", "x1", "") + "," + row("B", "x1", "") + "]",
		"alias is a name":      "[" + row("A", "a1", "") + "," + row("B", "a", "") + "]",
		"family of one":        "[" + row("A", "a1", "fam") + "," + row("B", "b1", "") + "]",
		"family is a name":     "[" + row("A", "a1", "b") + "," + row("B", "b1", "b") + "]",
		"missing source":       `[{"name": "A", "memory_mib": 1}]`,
		"zero memory":          `[{"name": "A", "memory_mib": 0, "source": "s"}]`,
		"not json":             `[`,
		"zero tflops":          `[{"name": "A", "memory_mib": 1, "source": "s", "dense_16bit_tflops": 0, "tflops_source": "d"}]`,
		"tflops, no source":    `[{"name": "A", "memory_mib": 1, "source": "s", "dense_16bit_tflops": 312}]`,
		"bandwidth, no source": `[{"name": "A", "memory_mib": 1, "source": "s", "memory_gbps": 936}]`,
		"negative bandwidth":   `[{"name": "A", "memory_mib": 1, "source": "s", "memory_gbps": -1, "bandwidth_source": "d"}]`,
	} {
		if _, err := loadTable([]byte(data)); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
	if _, err := loadTable([]byte("[" + row("A", "a1", "fam") + "," + row("B", "b1", "fam") + "]")); err != nil {
		t.Errorf("a valid two-card family: %v", err)
	}
}

func TestSupports(t *testing.T) {
	type res struct{ BF16, BF16Known, FA2, FA2Known bool }
	tests := []struct {
		name string
		want res
	}{
		{"t4", res{false, true, false, true}},
		{"v100-16gb", res{false, true, false, true}},
		{"p100-16gb", res{false, true, false, true}},
		{"a100-80gb", res{true, true, true, true}},
		{"4090", res{true, true, true, true}},
		{"h100", res{true, true, true, true}},
		{"b200", res{true, true, false, false}}, // Blackwell: not in FlashAttention-2's list
		{"5090", res{true, true, false, false}},
		{"mi300x", res{true, true, true, true}},
		{"mi250", res{true, true, true, true}},
		{"mi100", res{true, true, false, false}},
		{"7900xtx", res{true, true, false, false}},
	}
	for _, tt := range tests {
		c, err := Lookup(tt.name)
		if err != nil {
			t.Fatal(err)
		}
		var got res
		got.BF16, got.BF16Known = c.SupportsBF16()
		got.FA2, got.FA2Known = c.SupportsFlashAttention2()
		if got != tt.want {
			t.Errorf("%s (%s, cc %s): %+v, want %+v", tt.name, c.Name, c.ComputeCapability, got, tt.want)
		}
	}
	if s, known := (Card{}).SupportsBF16(); s || known {
		t.Errorf("zero Card: bf16 %v known %v", s, known)
	}
	if s, known := (Card{}).SupportsFlashAttention2(); s || known {
		t.Errorf("zero Card: FA2 %v known %v", s, known)
	}
	// Every NVIDIA row's bf16 flag agrees with its compute capability.
	for _, c := range Cards() {
		if c.Vendor != "nvidia" {
			continue
		}
		major, _, _ := strings.Cut(c.ComputeCapability, ".")
		if want := major >= "8" || len(major) > 1; c.BF16 != want {
			t.Errorf("%s: bf16 %v but compute capability %s", c.Name, c.BF16, c.ComputeCapability)
		}
	}
}

// TestMemoryBandwidth pins the datasheet bandwidths the time model charges
// QLoRA's dequantization with.
func TestMemoryBandwidth(t *testing.T) {
	for name, want := range map[string]float64{"rtx-4090": 1008, "rtx-3090": 936, "a100-80gb": 2039, "h100": 3350, "a800-80gb": 0} {
		c, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		var got float64
		if c.MemoryGBps != nil {
			got = *c.MemoryGBps
		}
		if got != want {
			t.Errorf("%s: memory_gbps %v, want %v", name, got, want)
		}
		if got > 0 && !strings.Contains(c.BandwidthSource, "B/s") {
			t.Errorf("%s: bandwidth_source %q does not state the figure", name, c.BandwidthSource)
		}
	}
}

// TestDenseTFLOPs pins the peaks the time model divides by to the dense
// (no sparsity) datasheet figures, and leaves unsourced cards without one.
func TestDenseTFLOPs(t *testing.T) {
	for name, want := range map[string]float64{"a100-80gb": 312, "h100": 989, "rtx-4090": 165.2, "t4": 65, "l4": 121, "rtx-4080": 97.5, "rtx-a5000": 111.1, "rtx-a6000": 154.8, "rtx-6000-ada": 364.2, "a800-80gb": 0, "h800": 0, "p40": 0} {
		c, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		var got float64
		if c.DenseTFLOPs16 != nil {
			got = *c.DenseTFLOPs16
		}
		if got != want {
			t.Errorf("%s: dense_16bit_tflops %v, want %v", name, got, want)
		}
		if got > 0 && !strings.Contains(c.TFLOPsSource, "TFLOPS") {
			t.Errorf("%s: tflops_source %q does not state the figure", name, c.TFLOPsSource)
		}
	}
}
