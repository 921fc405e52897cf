package cli

import (
	"bytes"
	"testing"
)

func TestControlEscaper(t *testing.T) {
	tests := []struct {
		writes []string
		want   string
	}{
		{[]string{"plain\tcolumns\n"}, "plain\tcolumns\n"},
		{[]string{"a\x1b[31mred\x1b]0;title\x07\r\b\x7f"}, `a\x1b[31mred\x1b]0;title\x07\x0d\x08\x7f`},
		{[]string{"csi\u009b2J é µs →"}, `csi\u009b2J é µs →`},
		{[]string{"raw \x9b byte"}, `raw \x9b byte`},
		// A C1 control split across two writes is still caught.
		{[]string{"x\xc2", "\x9by"}, `x\u009by`},
		{[]string{"é"[:1], "é"[1:]}, "é"},
	}
	for _, tt := range tests {
		var b bytes.Buffer
		e := &controlEscaper{w: &b}
		for _, w := range tt.writes {
			if n, err := e.Write([]byte(w)); n != len(w) || err != nil {
				t.Errorf("Write(%q) = %d, %v", w, n, err)
			}
		}
		if b.String() != tt.want {
			t.Errorf("writes %q gave %q, want %q", tt.writes, b.String(), tt.want)
		}
	}
}
