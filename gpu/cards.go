package gpu

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/canifinetune/canifinetune/internal/bytesize"
	names "github.com/canifinetune/canifinetune/internal/suggest"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// MiB is the unit of the table and of nvidia-smi's memory fields: 2^20 bytes.
const MiB int64 = bytesize.MiB

// GiB is 2^30 bytes: what every *_gb field of the JSON outputs means.
const GiB int64 = bytesize.GiB

// Card is one row of the embedded GPU table.
type Card struct {
	// Name is the name the driver reports (nvidia-smi's "name", rocm-smi's
	// "Card series"), so that a detected device matches its row exactly.
	Name string `json:"name"`
	// Aliases are the short names a user types: "rtx-4090", "a100-80gb",
	// "h100-sxm". An alias names exactly one card. The first alias is the one
	// error messages suggest.
	Aliases []string `json:"aliases"`
	// Families are names shared with sibling cards that differ in memory or
	// form factor ("v100" for the 16 GB and 32 GB V100, "a100" for the four
	// A100s). Typing a family name is ambiguous: Lookup lists the cards it
	// could mean instead of picking one.
	Families []string `json:"families,omitempty"`
	// Vendor is "nvidia" or "amd".
	Vendor string `json:"vendor"`
	// Arch is the architecture: "Ampere", "Hopper", "CDNA3", ….
	Arch string `json:"arch"`
	// MemoryMiB is the memory as the driver reports it (nvidia-smi
	// memory.total, rocm-smi VRAM Total Memory / 2^20). It is below the
	// marketing figure: an RTX 4090 reports 24564 MiB, not 24 GiB.
	MemoryMiB int64 `json:"memory_mib"`
	// ComputeCapability is the CUDA compute capability ("8.9", as NVIDIA's
	// CUDA GPUs page lists it) or, for AMD, the gfx target ("gfx942").
	ComputeCapability string `json:"compute_capability"`
	// BF16 reports native bfloat16 support (CUDA compute capability ≥ 8.0;
	// CDNA and RDNA3 on ROCm). Without it, training falls back to fp16.
	// Read it through SupportsBF16, which also says whether it is known.
	BF16 bool `json:"bf16"`
	// Source names where the row's numbers come from: the vendor's datasheet
	// or specification page for the nominal capacity, and the driver reading
	// MemoryMiB is taken from.
	Source string `json:"source"`
	// DenseTFLOPs16 is the card's 16-bit Tensor Core peak in TFLOPS without
	// structured sparsity: bf16, or fp16 on cards without bf16, as the
	// vendor's datasheet or architecture whitepaper states it (datasheets
	// print the sparse figure, twice the dense one, first). nil where no
	// such figure was found: the time model then says the time is unknown,
	// rather than guess. TFLOPsSource names the document and the figure.
	DenseTFLOPs16 *float64 `json:"dense_16bit_tflops,omitempty"`
	TFLOPsSource  string   `json:"tflops_source,omitempty"`
	// MemoryGBps is the card's peak memory bandwidth in GB/s (10^9 bytes)
	// as its datasheet states it, nil where none was taken; the time model
	// charges memory-bound work (QLoRA's dequantization) with it.
	// BandwidthSource names the document and the figure.
	MemoryGBps      *float64 `json:"memory_gbps,omitempty"`
	BandwidthSource string   `json:"bandwidth_source,omitempty"`
	// Nominal marks a row whose memory is the documented nominal capacity
	// because no driver reading was found; the real reading is a little lower.
	Nominal bool `json:"nominal,omitempty"`
}

// MemoryBytes is the card's memory in bytes.
func (c Card) MemoryBytes() int64 { return c.MemoryMiB * MiB }

// SupportsBF16 reports whether the card computes in bfloat16 natively, and
// whether the table knows: known is false for a card without a compute
// capability, such as the zero Card of a run sized by --gpu-vram-gb alone.
// NVIDIA cards have bf16 from compute capability 8.0 (Ampere) on, as NVIDIA's
// CUDA GPUs page lists them; a T4 (7.5) or V100 (7.0) does not, and
// training on it in bf16 fails or falls back to fp16.
func (c Card) SupportsBF16() (supported, known bool) {
	if c.ComputeCapability == "" {
		return false, false
	}
	return c.BF16, true
}

// SupportsFlashAttention2 reports whether the flash-attn package's
// FlashAttention-2 kernels run on the card, and whether that is known. Its
// README lists Ampere, Ada and Hopper for CUDA (compute capability 8.0 to
// 9.0; Turing such as the T4 needs FlashAttention 1.x) and, on ROCm, the
// MI200 and MI300 (gfx90a, gfx942). Other cards, Blackwell and MI100
// among them, are not listed either way: known is false.
func (c Card) SupportsFlashAttention2() (supported, known bool) {
	cc := c.ComputeCapability
	if c.Vendor == "amd" {
		if cc == "gfx90a" || cc == "gfx942" {
			return true, true
		}
		return false, false
	}
	major, _, ok := strings.Cut(cc, ".")
	m, err := strconv.Atoi(major)
	if !ok || err != nil {
		return false, false
	}
	switch {
	case m < 8:
		return false, true
	case m <= 9:
		return true, true
	}
	return false, false
}

// ErrUnknownGPU is returned (wrapped) by Lookup for a name that matches no card.
var ErrUnknownGPU = errors.New("unknown GPU")

// ErrAmbiguousGPU is returned (wrapped) by Lookup for a name that matches
// several cards; the message lists them.
var ErrAmbiguousGPU = errors.New("ambiguous GPU name")

// LookupError is the error Lookup returns. errors.Is matches it against
// ErrAmbiguousGPU when the name could mean several cards and ErrUnknownGPU
// otherwise.
type LookupError struct {
	// Name is what was looked up, as given.
	Name string
	// Ambiguous reports that Name is a family name or size shared by several
	// cards, listed in Candidates; otherwise Name matched no card and
	// Candidates are the closest names (possibly none).
	Ambiguous bool
	// Candidates are the cards Name could mean (ambiguous) or the nearest
	// names by spelling (unknown), at most three then.
	Candidates []Card
	// Detail, when set, says why a near miss was refused, e.g. that the
	// card named has other memory than the size given.
	Detail string
}

func (e *LookupError) Error() string {
	var b strings.Builder
	if e.Ambiguous {
		fmt.Fprintf(&b, "%v %q: it could be %s; name one of them", ErrAmbiguousGPU, e.Name, quoteNames(e.Candidates))
		return b.String()
	}
	fmt.Fprintf(&b, "%v %q", ErrUnknownGPU, e.Name)
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	if len(e.Candidates) > 0 {
		b.WriteString("; did you mean " + quoteNames(e.Candidates) + "?")
	}
	b.WriteString(" (`canifinetune gpus` lists the table)")
	return b.String()
}

// Unwrap returns ErrAmbiguousGPU or ErrUnknownGPU.
func (e *LookupError) Unwrap() error {
	if e.Ambiguous {
		return ErrAmbiguousGPU
	}
	return ErrUnknownGPU
}

//go:embed cards.json
var cardsJSON []byte

// table is the parsed embedded table and its lookup index, built once.
var table = mustLoadTable(cardsJSON)

type cardTable struct {
	cards []Card
	// byKey maps a normalized name or alias to the one card it names.
	byKey map[string]int
	// family maps a normalized family name to the cards sharing it, in
	// table order; every family has at least two cards.
	family map[string][]int
}

func mustLoadTable(data []byte) cardTable {
	t, err := loadTable(data)
	if err != nil {
		// The table is embedded and checked by TestCardsTable: a failure here
		// is a build defect, not bad user input.
		panic(fmt.Sprintf("gpu: embedded cards.json: %v", err))
	}
	return t
}

func loadTable(data []byte) (cardTable, error) {
	var cards []Card
	if err := json.Unmarshal(data, &cards); err != nil {
		return cardTable{}, fmt.Errorf("parse: %w", err)
	}
	t := cardTable{cards: cards, byKey: map[string]int{}, family: map[string][]int{}}
	for i, c := range cards {
		if c.Name == "" || c.MemoryMiB <= 0 || c.Source == "" {
			return cardTable{}, fmt.Errorf("row %d (%q): name, memory_mib and source are required", i, c.Name)
		}
		if f := c.DenseTFLOPs16; f != nil && (!(*f > 0 && *f < 1e5) || c.TFLOPsSource == "") {
			return cardTable{}, fmt.Errorf("row %d (%q): dense_16bit_tflops must be a positive figure below 1e5 with its tflops_source, got %v", i, c.Name, *f)
		}
		if f := c.MemoryGBps; f != nil && (!(*f > 0 && *f < 1e6) || c.BandwidthSource == "") {
			return cardTable{}, fmt.Errorf("row %d (%q): memory_gbps must be a positive figure below 1e6 with its bandwidth_source, got %v", i, c.Name, *f)
		}
		for _, k := range cardKeys(c) {
			if j, ok := t.byKey[k]; ok && j != i {
				return cardTable{}, fmt.Errorf("row %d (%q): name %q already names %q", i, c.Name, k, cards[j].Name)
			}
			t.byKey[k] = i
		}
		for _, f := range c.Families {
			k := normalize(f)
			if k == "" {
				return cardTable{}, fmt.Errorf("row %d (%q): empty family name", i, c.Name)
			}
			if !slices.Contains(t.family[k], i) {
				t.family[k] = append(t.family[k], i)
			}
		}
	}
	for k, idx := range t.family {
		if j, ok := t.byKey[k]; ok {
			return cardTable{}, fmt.Errorf("family %q is also a name of %q", k, cards[j].Name)
		}
		if len(idx) < 2 {
			return cardTable{}, fmt.Errorf("family %q has only %q: make it an alias", k, cards[idx[0]].Name)
		}
	}
	return t, nil
}

// cardKeys are the normalized names a card answers to: its driver name, that
// name without a leading "rtx" (so "a6000" and "4090" work), and its aliases.
func cardKeys(c Card) []string {
	keys := []string{normalize(c.Name)}
	if k, ok := strings.CutPrefix(keys[0], "rtx"); ok && k != "" {
		keys = append(keys, k)
	}
	for _, a := range c.Aliases {
		keys = append(keys, normalize(a))
	}
	return keys
}

// vendorWords are dropped when normalizing: they carry no identity ("NVIDIA
// GeForce RTX 4090" and "rtx 4090" are the same card).
var vendorWords = []string{"nvidia", "geforce", "tesla", "amd", "instinct", "radeon"}

// normalize lowercases name, drops vendor words and everything that is not a
// letter or digit: "NVIDIA GeForce RTX 4090" → "rtx4090", "A100-80GB" → "a10080gb".
func normalize(name string) string {
	var words []string
	for _, w := range strings.FieldsFunc(strings.ToLower(name), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	}) {
		if !slices.Contains(vendorWords, w) {
			words = append(words, w)
		}
	}
	return strings.Join(words, "")
}

// Cards returns a copy of the embedded table in its file order (by vendor,
// then generation).
func Cards() []Card {
	out := make([]Card, len(table.cards))
	for i := range table.cards {
		out[i] = cardAt(i)
	}
	return out
}

// Lookup finds a card by name. The name is compared whole, after
// normalization: case, spaces, dashes, dots and the vendor words NVIDIA,
// GeForce, Tesla, AMD, Instinct and Radeon do not matter, so "rtx-4090",
// "RTX 4090", "rtx4090", "4090" and "NVIDIA GeForce RTX 4090" are one card.
// It accepts the driver's name, a listed alias ("a100-80gb", "h100-pcie"),
// the name without "RTX" ("a6000"), and a name followed by the card's memory
// size ("rtx 3090 24gb", "v100 32gb").
//
// A name is never completed: "h20" is the 96 GB H20, not the H200, and "h1"
// is no card at all. A family name shared by variants with other memory or
// form factor ("a100", "v100", "gh200") is ambiguous: the error lists the
// cards it could mean. "h100" is an alias of the H100 SXM 80GB, documented
// in the table: the PCIe card has the same 80 GB, and the 94 GB card is always
// sold as "H100 NVL". An unknown name's error suggests the closest names.
// Every error is a *LookupError.
func Lookup(name string) (Card, error) {
	idx, err := resolve(name)
	if err != nil {
		return Card{}, err
	}
	if len(idx) > 1 {
		return Card{}, &LookupError{Name: name, Ambiguous: true, Candidates: cardsAt(idx)}
	}
	return cardAt(idx[0]), nil
}

func cardAt(i int) Card {
	c := table.cards[i]
	c.Aliases = slices.Clone(c.Aliases)
	c.Families = slices.Clone(c.Families)
	return c
}

func cardsAt(idx []int) []Card {
	out := make([]Card, len(idx))
	for j, i := range idx {
		out[j] = cardAt(i)
	}
	return out
}

// resolve returns the cards name means: one for a name or alias, several for
// a family name. It never completes a partial name.
func resolve(name string) ([]int, *LookupError) {
	key := normalize(name)
	if key == "" {
		return nil, &LookupError{Name: name, Detail: "empty name"}
	}
	if idx, ok := keyIndices(key); ok {
		return idx, nil
	}
	// A name with a memory size ("rtx 3090 24gb", "v100 32gb") is the card
	// or family without it, narrowed to the cards of that size.
	if m := sizeSuffixRE.FindStringSubmatch(strings.TrimSpace(name)); m != nil {
		if idx, ok := keyIndices(normalize(m[1])); ok {
			gb, _ := strconv.ParseFloat(m[2], 64)
			var fit []int
			for _, i := range idx {
				if sizeMatches(table.cards[i].MemoryMiB, gb) {
					fit = append(fit, i)
				}
			}
			if len(fit) > 0 {
				return fit, nil
			}
			var sizes []string
			for _, i := range idx {
				sizes = append(sizes, fmt.Sprintf("%s has %d MiB", table.cards[i].Name, table.cards[i].MemoryMiB))
			}
			return nil, &LookupError{Name: name, Detail: fmt.Sprintf("the table's %s, not %s GB", strings.Join(sizes, ", "), m[2]), Candidates: cardsAt(idx[:min(3, len(idx))])}
		}
	}
	return nil, &LookupError{Name: name, Candidates: cardsAt(suggest(key))}
}

// keyIndices looks a normalized key up as a name or alias, then as a family.
func keyIndices(key string) ([]int, bool) {
	if i, ok := table.byKey[key]; ok {
		return []int{i}, true
	}
	if idx, ok := table.family[key]; ok {
		return slices.Clone(idx), true
	}
	return nil, false
}

// sizeSuffixRE splits a name ending in a separated memory size: "RTX 3090
// 24GB" → "RTX 3090", "24".
var sizeSuffixRE = regexp.MustCompile(`(?i)^(.*?)[\s_-]+(\d+)\s*gb$`)

// sizeMatches reports whether a card of mib MiB is sold as gb GB: within
// 10 % of gb GiB, which covers both GiB-ish readings (24564 MiB for "24 GB")
// and decimal marketing GB (24 × 10^9 bytes = 22888 MiB).
func sizeMatches(mib int64, gb float64) bool {
	want := gb * 1024
	return float64(mib) > 0.9*want && float64(mib) < 1.1*want
}

// suggest returns the cards closest to key, at most three, in table order:
// those whose names start with key ("h1" → the H100s), else contain it or
// are contained in it, else are within a small edit distance ("rtx4095" →
// "rtx4090"). Only the closest tier is kept, so a near miss is not buried
// among far ones. They are offered in the error, never substituted.
func suggest(key string) []int {
	// score ranks a candidate name k: lower is closer; -1 is too far.
	score := func(k string) int {
		switch {
		case strings.HasPrefix(k, key):
			return 1
		case strings.Contains(k, key) || strings.Contains(key, k) && len(k) >= 3:
			return 2
		}
		if d := names.Distance(key, k); d <= max(2, len(key)/3) {
			return 2 + d
		}
		return -1
	}
	best := map[int]int{}
	consider := func(k string, idx []int) {
		sc := score(k)
		if sc < 0 {
			return
		}
		for _, i := range idx {
			if old, ok := best[i]; !ok || sc < old {
				best[i] = sc
			}
		}
	}
	for k, i := range table.byKey {
		consider(k, []int{i})
	}
	for k, idx := range table.family {
		consider(k, idx)
	}
	top := -1
	for _, sc := range best {
		if top < 0 || sc < top {
			top = sc
		}
	}
	var out []int
	for i, sc := range best {
		if sc == top {
			out = append(out, i)
		}
	}
	sort.Ints(out)
	return out[:min(3, len(out))]
}

// quoteNames lists cards for an error: the driver name and the first alias,
// the short name to type.
func quoteNames(cards []Card) string {
	var names []string
	for _, c := range cards {
		n := fmt.Sprintf("%q", c.Name)
		if len(c.Aliases) > 0 {
			n += fmt.Sprintf(" (%s)", c.Aliases[0])
		}
		names = append(names, n)
	}
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	case 2:
		return names[0] + " or " + names[1]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// memoryTolerance is how far a detected total may sit from a row's MemoryMiB
// and still be that card. Driver versions move the reading by about 1 %
// (V100 16160 vs 16384 MiB, A100 40536 vs 40960 MiB); a same-name variant
// with other memory (RTX 4060 Ti 8 GB vs 16 GB) is 50 % away.
const memoryTolerance = 0.05

// Match identifies a detected device: the card named name whose memory is
// within 5 % of totalMiB (when totalMiB > 0). Among several candidates it
// takes the one closest in memory. It reports false when no row fits, so a
// card absent from the table is never mistaken for a neighbour.
func Match(name string, totalMiB int64) (Card, bool) {
	idx, err := resolve(name)
	if err != nil {
		return Card{}, false
	}
	best, bestDiff := -1, int64(-1)
	for _, i := range idx {
		diff := table.cards[i].MemoryMiB - totalMiB
		if diff < 0 {
			diff = -diff
		}
		if totalMiB > 0 && float64(diff) > memoryTolerance*float64(table.cards[i].MemoryMiB) {
			continue
		}
		if best < 0 || diff < bestDiff {
			best, bestDiff = i, diff
		}
	}
	if best < 0 || totalMiB <= 0 && len(idx) > 1 {
		return Card{}, false
	}
	return cardAt(best), true
}
