package hfconfig

import (
	"os"
	"strings"
	"testing"
)

// A Qwen2-family config's sliding_window counts only with use_sliding_window
// true, and then only for the layers from max_window_layers on:
// transformers' Qwen2Config sets no window otherwise, and the Hub's Qwen2.5
// and R1-Distill-Qwen files carry a window beside use_sliding_window false.
func TestUseSlidingWindowFalse(t *testing.T) {
	b, err := os.ReadFile("testdata/qwen2.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		edits []string // pairs: from, to
		want  int64
	}{
		{"as shipped", nil, 0},
		{"a 4096 window, unused", []string{`"sliding_window": 131072`, `"sliding_window": 4096`}, 0},
		// testdata/qwen2.json has max_window_layers 28 of 28 layers: none
		// slides even with the switch on.
		{"used, from max_window_layers = every layer", []string{`"use_sliding_window": false`, `"use_sliding_window": true`}, 0},
		{"used from layer 20", []string{`"use_sliding_window": false`, `"use_sliding_window": true`, `"max_window_layers": 28`, `"max_window_layers": 20`}, 131072},
		{"used, no max_window_layers", []string{`"use_sliding_window": false`, `"use_sliding_window": true`, `"max_window_layers": 28,`, ``}, 131072},
		{"no use_sliding_window key", []string{`"use_sliding_window": false,`, ``}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := string(b)
			for i := 0; i+1 < len(c.edits); i += 2 {
				if !strings.Contains(cfg, c.edits[i]) {
					t.Fatalf("testdata/qwen2.json has no %s", c.edits[i])
				}
				cfg = strings.Replace(cfg, c.edits[i], c.edits[i+1], 1)
			}
			m, err := Parse([]byte(cfg))
			if err != nil {
				t.Fatal(err)
			}
			if m.SlidingWindow != c.want {
				t.Errorf("sliding window %d, want %d", m.SlidingWindow, c.want)
			}
		})
	}
	bad := strings.Replace(string(b), `"use_sliding_window": false`, `"use_sliding_window": "no"`, 1)
	if _, err := Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), "use_sliding_window") {
		t.Errorf("a string use_sliding_window: %v, want an error naming the field", err)
	}
}
