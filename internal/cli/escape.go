package cli

import (
	"fmt"
	"io"
	"unicode/utf8"
)

// controlEscaper writes text with its control characters made visible: a
// C0 control other than newline and tab, DEL, a byte that is not UTF-8, or a
// C1 control (U+0080 to U+009F) becomes \xNN or \u00NN. Text from outside input (a trace's kernel
// names) then cannot move the cursor, retitle the window or recolour the
// terminal. A rune split across two writes is held until the second.
type controlEscaper struct {
	w       io.Writer
	pending []byte
	buf     []byte
}

func (e *controlEscaper) Write(p []byte) (int, error) {
	in := p
	if len(e.pending) > 0 {
		in = append(e.pending, p...)
		e.pending = nil
	}
	out := e.buf[:0]
	for i := 0; i < len(in); {
		c := in[i]
		if c < utf8.RuneSelf {
			if c < 0x20 && c != '\n' && c != '\t' || c == 0x7f {
				out = fmt.Appendf(out, `\x%02x`, c)
			} else {
				out = append(out, c)
			}
			i++
			continue
		}
		if !utf8.FullRune(in[i:]) {
			e.pending = append(e.pending, in[i:]...)
			break
		}
		r, n := utf8.DecodeRune(in[i:])
		if r == utf8.RuneError && n == 1 {
			out = fmt.Appendf(out, `\x%02x`, in[i]) // not UTF-8: a raw 0x9b is CSI to an 8-bit terminal
		} else if r >= 0x80 && r <= 0x9f {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, in[i:i+n]...)
		}
		i += n
	}
	e.buf = out
	if _, err := e.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}
