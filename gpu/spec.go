package gpu

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// GPUSpec is one term of a card list: Count cards of one kind.
type GPUSpec struct {
	Count int  `json:"count"`
	Card  Card `json:"card"`
}

// maxGPUsPerTerm bounds a count so that a typo ("80xA100") is caught rather
// than planned for; 1024 GPUs is beyond any single training job this tool
// sizes per GPU.
const maxGPUsPerTerm = 1024

// ParseGPUList parses a card list: comma-separated terms, each "N x NAME"
// or just "NAME" (N = 1), e.g. "4xA100-80GB", "2xH100,1x4090", "8×h100".
// The separator may be "x", "×" or "*" with optional spaces. Terms naming the
// same card are kept separate, in order. Names resolve with Lookup.
func ParseGPUList(s string) ([]GPUSpec, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("empty GPU list; write e.g. 4xA100-80GB or 2xH100,1x4090")
	}
	var out []GPUSpec
	for term := range strings.SplitSeq(s, ",") {
		term = strings.TrimSpace(term)
		if term == "" {
			return nil, fmt.Errorf("GPU list %q has an empty term", s)
		}
		count, name := 1, term
		if n, rest, ok := splitCount(term); ok {
			c, err := strconv.Atoi(n)
			if err != nil || c < 1 || c > maxGPUsPerTerm {
				return nil, fmt.Errorf("GPU list term %q: count %q must be an integer from 1 to %d", term, n, maxGPUsPerTerm)
			}
			count, name = c, rest
		}
		card, err := Lookup(name)
		if err != nil {
			return nil, fmt.Errorf("GPU list term %q: %w", term, err)
		}
		out = append(out, GPUSpec{Count: count, Card: card})
	}
	return out, nil
}

// splitCount splits "4xA100" / "4 x A100" / "4×A100" / "4*A100" into "4" and
// "A100". It reports false for terms without a leading count, including names
// that start with digits ("4090", "3060-12gb").
func splitCount(term string) (count, name string, ok bool) {
	i := 0
	for i < len(term) && term[i] >= '0' && term[i] <= '9' {
		i++
	}
	if i == 0 {
		return "", "", false
	}
	rest := strings.TrimLeft(term[i:], " ")
	for _, sep := range []string{"x", "X", "×", "*"} {
		if after, found := strings.CutPrefix(rest, sep); found {
			after = strings.TrimSpace(after)
			if after == "" {
				return "", "", false
			}
			return term[:i], after, true
		}
	}
	return "", "", false
}

// TotalGPUs is the number of GPUs a list names.
func TotalGPUs(specs []GPUSpec) int {
	n := 0
	for _, s := range specs {
		n += s.Count
	}
	return n
}

// maxGPUIndex bounds what LooksLikeIndexList takes for an index: no host
// exposes 256 GPUs to one process, while card names start at "2060".
const maxGPUIndex = 255

// LooksLikeIndexList reports whether s is a list of detected GPU indices
// ("0", "0,2") rather than a card list, so that one --gpus flag can take both.
// Numbers above 255 are card names: "4090" is an RTX 4090, not GPU 4090.
func LooksLikeIndexList(s string) bool {
	s = strings.TrimSpace(s)
	if s == "" {
		return false
	}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 || n > maxGPUIndex || strings.TrimLeft(f, "0123456789") != "" {
			return false
		}
	}
	return true
}

// ParseIndexList parses detected GPU indices ("0,2"): non-negative, distinct.
// Validating them against the machine is SelectExplicit's job.
func ParseIndexList(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("empty GPU index list; write e.g. 0,2")
	}
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("GPU index %q in %q is not a non-negative integer", f, s)
		}
		if slices.Contains(out, n) {
			return nil, fmt.Errorf("GPU index %d is listed twice in %q", n, s)
		}
		out = append(out, n)
	}
	return out, nil
}
