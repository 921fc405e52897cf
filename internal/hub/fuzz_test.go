package hub

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzIndex: model.safetensors.index.json comes from the Hub or a local
// directory; no input may panic, and every shard accepted must be a path
// inside the repo, since it becomes a URL and a cache path, and printable,
// since it is shown.
func FuzzIndex(f *testing.F) {
	f.Add([]byte(`{"metadata":{"total_size":123},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`))
	f.Add([]byte(`{"metadata":{"total_size":1.6e10},"weight_map":{"a":"x.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"a":"../x.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"a":"sub/x.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"a":"\u001b[2Jx.safetensors"}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := &Model{ID: "org/x"}
		shards, err := m.useIndex(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error wraps no sentinel: %v", err)
			}
			return
		}
		if len(shards) == 0 || !slices.IsSorted(shards) || m.TotalSizeFromIndex < 0 {
			t.Fatalf("shards %q, total %d", shards, m.TotalSizeFromIndex)
		}
		for _, s := range shards {
			if !fs.ValidPath(s) || strings.ContainsFunc(s, unprintable) || !utf8.ValidString(s) {
				t.Fatalf("accepted shard %q", s)
			}
		}
	})
}

// FuzzOutsideText: whatever a server sends as an error message, what is
// printed holds no run of minTokenPiece characters of the token, no
// character that drives a terminal, and is bounded.
func FuzzOutsideText(f *testing.F) {
	f.Add("Access denied. Got: Bearer hf_abcdefghijklmnop", "hf_abcdefghijklmnop")
	f.Add(strings.Repeat("x", 290)+"Bearer hf_abcdefghijklmnop", "hf_abcdefghijklmnop")
	f.Add("cut: hf_abcdefghijklmno", "hf_abcdefghijklmnop")
	f.Add("\x1b]0;title\x07\x1b[2J\u202eevil\xff", "hf_x")
	f.Fuzz(func(t *testing.T, msg, tok string) {
		if len(tok) < minTokenPiece || strings.ContainsFunc(tok, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
		}) {
			return // Hub tokens are hf_ and letters and digits
		}
		c := &Client{Token: Token(tok)}
		out := c.outsideText(msg)
		for i := 0; i+minTokenPiece <= len(tok); i++ {
			if strings.Contains(out, tok[i:i+minTokenPiece]) && !strings.Contains(redacted, tok[i:i+minTokenPiece]) {
				t.Fatalf("out %q holds %q of the token %q", out, tok[i:i+minTokenPiece], tok)
			}
		}
		if strings.ContainsFunc(out, unprintable) || !utf8.ValidString(out) {
			t.Fatalf("out %q holds a control character", out)
		}
		if len(out) > maxMessage+len("…") {
			t.Fatalf("out is %d bytes", len(out))
		}
	})
}

// FuzzContentRange: a Content-Range either parses to a start and a total
// that are not negative (-1 for "*") or is refused; never a panic.
func FuzzContentRange(f *testing.F) {
	for _, s := range []string{"bytes 0-7/1000", "bytes 8-99/*", "bytes */1000", "bytes -1-7/1000", "bytes 0-7/99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		first, total, err := parseContentRange(s)
		if err != nil {
			return
		}
		if first < 0 || total < -1 {
			t.Fatalf("parseContentRange(%q) = %d, %d", s, first, total)
		}
		if total == -1 && !strings.HasSuffix(s, "/*") {
			t.Fatalf("parseContentRange(%q): unknown total from %s", s, fmt.Sprint(total))
		}
	})
}
