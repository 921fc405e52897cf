package gpu

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	names "github.com/canifinetune/canifinetune/internal/suggest"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// MiB is the unit of the table and of nvidia-smi's memory fields: 2^20 bytes.
const MiB int64 = 1 << 20

// GiB is 2^30 bytes: what every *_gb field of the JSON outputs means.
const GiB int64 = 1 << 30

// Card is one row of the embedded GPU table.
type Card struct {
	// Name is the name the driver reports (nvidia-smi's "name", rocm-smi's
	// "Card series"), so that a detected device matches its row exactly.
	Name string `json:"name"`
	// Aliases are the short names a user types: "rtx-4090", "a100-80gb", "h100".
	// An alias names exactly one card; the family names "a100" and "h100"
	// are aliases of the documented defaults (A100-SXM4-80GB, H100 SXM 80GB).
	Aliases []string `json:"aliases"`
	// Vendor is "nvidia" or "amd".
	Vendor string `json:"vendor"`
	// Arch is the architecture: "Ampere", "Hopper", "CDNA3", ….
	Arch string `json:"arch"`
	// MemoryMiB is the memory as the driver reports it (nvidia-smi
	// memory.total, rocm-smi VRAM Total Memory / 2^20). It is below the
	// marketing figure: an RTX 4090 reports 24564 MiB, not 24 GiB.
	MemoryMiB int64 `json:"memory_mib"`
	// ComputeCapability is the CUDA compute capability ("8.9") or, for AMD,
	// the gfx target ("gfx942").
	ComputeCapability string `json:"compute_capability"`
	// BF16 reports native bfloat16 support (CUDA compute capability ≥ 8.0;
	// CDNA and RDNA3 on ROCm). Without it, training falls back to fp16.
	BF16 bool `json:"bf16"`
	// Source says where MemoryMiB comes from.
	Source string `json:"source"`
	// Nominal marks a row whose memory is the documented nominal capacity
	// because no driver reading was found; the real reading is a little lower.
	Nominal bool `json:"nominal,omitempty"`
}

// MemoryBytes is the card's memory in bytes.
func (c Card) MemoryBytes() int64 { return c.MemoryMiB * MiB }

// ErrUnknownGPU is returned (wrapped) by Lookup for a name that matches no card.
var ErrUnknownGPU = errors.New("unknown GPU")

// ErrAmbiguousGPU is returned (wrapped) by Lookup for a name that matches
// several cards; the message lists them.
var ErrAmbiguousGPU = errors.New("ambiguous GPU name")

//go:embed cards.json
var cardsJSON []byte

// table is the parsed embedded table and its lookup index, built once.
var table = mustLoadTable(cardsJSON)

type cardTable struct {
	cards []Card
	// byKey maps a normalized name or alias to the indices of the cards it
	// names; more than one index means the key is ambiguous.
	byKey map[string][]int
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
	t := cardTable{cards: cards, byKey: map[string][]int{}}
	for i, c := range cards {
		if c.Name == "" || c.MemoryMiB <= 0 || c.Source == "" {
			return cardTable{}, fmt.Errorf("row %d (%q): name, memory_mib and source are required", i, c.Name)
		}
		for _, k := range cardKeys(c) {
			if !slices.Contains(t.byKey[k], i) {
				t.byKey[k] = append(t.byKey[k], i)
			}
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
	for i, c := range table.cards {
		c.Aliases = slices.Clone(c.Aliases)
		out[i] = c
	}
	return out
}

// Lookup finds a card by a forgiving name: the driver's name ("NVIDIA H100
// 80GB HBM3"), an alias ("rtx-4090", "A100-80GB"), or a short form ("4090",
// "a6000"); case, spaces, dashes and vendor words do not matter. Family names
// resolve to documented defaults: "a100" is the A100-SXM4-80GB and "h100"
// the H100 SXM 80GB. A name that is a prefix of several cards' names followed
// only by a form factor or memory size ("v100" → 16GB or 32GB) is ambiguous
// and the error lists the candidates. An unknown name's error suggests close
// names.
func Lookup(name string) (Card, error) {
	idx, err := lookupIndices(name)
	if err != nil {
		return Card{}, err
	}
	if len(idx) > 1 {
		return Card{}, fmt.Errorf("%w %q: it could be %s; name one of them", ErrAmbiguousGPU, name, quoteNames(idx))
	}
	return cardAt(idx[0]), nil
}

func cardAt(i int) Card {
	c := table.cards[i]
	c.Aliases = slices.Clone(c.Aliases)
	return c
}

func lookupIndices(name string) ([]int, error) {
	key := normalize(name)
	if key == "" {
		return nil, fmt.Errorf("%w: empty name; see `canifinetune gpus` for the table", ErrUnknownGPU)
	}
	if idx, ok := table.byKey[key]; ok {
		return idx, nil
	}
	// A name with a memory size ("rtx 3090 24gb", "4060 ti 16gb") is the
	// card without it, if that card's memory is the size given.
	if m := sizeSuffixRE.FindStringSubmatch(strings.TrimSpace(name)); m != nil {
		if idx, ok := table.byKey[normalize(m[1])]; ok {
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
			return nil, fmt.Errorf("%w %q: the table's %s has %d MiB, not %s GB", ErrUnknownGPU, name, table.cards[idx[0]].Name, table.cards[idx[0]].MemoryMiB, m[2])
		}
	}
	// A family name followed only by a form factor or size is a prefix of each
	// variant's key: "v100" of "v100sxm216gb" and "v100sxm232gb".
	var idx []int
	for k, is := range table.byKey {
		if rest, ok := strings.CutPrefix(k, key); ok && hasLetter(key) && isVariantSuffix(rest) {
			for _, i := range is {
				if !slices.Contains(idx, i) {
					idx = append(idx, i)
				}
			}
		}
	}
	if len(idx) > 0 {
		sort.Ints(idx)
		return idx, nil
	}
	hint := ""
	if s := suggest(key); len(s) > 0 {
		hint = "; did you mean " + quoteNames(s) + "?"
	}
	return nil, fmt.Errorf("%w %q%s (`canifinetune gpus` lists the table)", ErrUnknownGPU, name, hint)
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

func hasLetter(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r >= 'a' && r <= 'z' })
}

// isVariantSuffix reports whether rest names only a form factor or memory size
// ("sxm216gb", "pcie40gb", "80gbhbm3", "nvl"), the parts that tell variants of
// one chip apart. A suffix such as "ti" or "super" names a different chip.
func isVariantSuffix(rest string) bool {
	if rest == "" {
		return false
	}
	for _, p := range []string{"sxm", "pcie", "nvl", "hbm", "oam"} {
		if strings.HasPrefix(rest, p) {
			return true
		}
	}
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	return i > 0 && strings.HasPrefix(rest[i:], "g")
}

// suggest returns the cards whose keys contain key or are within a small edit
// distance of it, closest first, at most three.
func suggest(key string) []int {
	type scored struct{ i, d int }
	best := map[int]int{}
	for k, is := range table.byKey {
		d := names.Distance(key, k)
		if strings.Contains(k, key) || strings.Contains(key, k) && len(k) >= 3 {
			d = min(d, 1)
		}
		if d > max(2, len(key)/3) {
			continue
		}
		for _, i := range is {
			if old, ok := best[i]; !ok || d < old {
				best[i] = d
			}
		}
	}
	var s []scored
	for i, d := range best {
		s = append(s, scored{i, d})
	}
	sort.Slice(s, func(a, b int) bool {
		if s[a].d != s[b].d {
			return s[a].d < s[b].d
		}
		return s[a].i < s[b].i
	})
	var out []int
	for _, x := range s[:min(3, len(s))] {
		out = append(out, x.i)
	}
	return out
}

func quoteNames(idx []int) string {
	var names []string
	for _, i := range idx {
		c := table.cards[i]
		n := fmt.Sprintf("%q", c.Name)
		if len(c.Aliases) > 0 {
			n += fmt.Sprintf(" (%s)", c.Aliases[0])
		}
		names = append(names, n)
	}
	switch len(names) {
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
	idx, err := lookupIndices(name)
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
