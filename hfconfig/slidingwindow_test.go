package hfconfig

import (
	"os"
	"strings"
	"testing"
)

// A Qwen2-family config's sliding_window counts only with use_sliding_window
// true: transformers' Qwen2Config sets no window otherwise, and the Hub's
// Qwen2.5 and R1-Distill-Qwen files carry a window beside
// use_sliding_window false.
func TestUseSlidingWindowFalse(t *testing.T) {
	b, err := os.ReadFile("testdata/qwen2.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, from, to string
		want           int64
	}{
		{"as shipped", "", "", 0},
		{"a 4096 window, unused", `"sliding_window": 131072`, `"sliding_window": 4096`, 0},
		{"the window, used", `"use_sliding_window": false`, `"use_sliding_window": true`, 131072},
		{"no use_sliding_window key", `"use_sliding_window": false,`, ``, 131072},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := string(b)
			if c.from != "" {
				if !strings.Contains(cfg, c.from) {
					t.Fatalf("testdata/qwen2.json has no %s", c.from)
				}
				cfg = strings.Replace(cfg, c.from, c.to, 1)
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
