package trace

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// scanner is a small streaming JSON tokenizer over a fixed-size buffer. It
// exists because encoding/json's Decoder.Token allocates per token and runs at
// tens of MB/s, far below the 300 MB/s that a multi-GB trace needs; the
// scanner copies only the strings and numbers the analysis keeps and skips
// everything else in place. Each token has a fast path that works inside the
// buffer (memberInBuf, numberInBuf, skipInBuf, the inlined half of peek) and
// falls back, having consumed nothing, to the general code that handles
// refills, escapes and errors; FuzzParseReadSizes checks that the two agree.
// Nesting is skipped with a counter, not recursion, so a deeply nested value
// cannot exhaust the stack.
type scanner struct {
	r    io.Reader
	buf  []byte
	pos  int   // next unread byte in buf
	end  int   // end of valid bytes in buf
	base int64 // input offset of buf[0]
	rerr error // sticky read error; io.EOF at the end of input

	keyBuf []byte // member's keys when they are not read in place
}

// scanBufSize is large enough that refills are rare and small enough to keep
// the resident set flat.
const scanBufSize = 256 << 10

// maxNumberLen bounds a number's text: no timestamp needs more, and the bound
// keeps a hostile "1e…" or a megabyte of digits from costing time or memory.
const maxNumberLen = 256

// errEOF is returned by scanner methods when input ends inside a value.
var errEOF = errors.New("unexpected end of input")

// syntaxError is malformed JSON at a byte offset.
type syntaxError struct {
	offset int64
	msg    string
}

func (e *syntaxError) Error() string { return fmt.Sprintf("at byte %d: %s", e.offset, e.msg) }

func newScanner(r io.Reader) *scanner {
	return &scanner{r: r, buf: make([]byte, scanBufSize)}
}

// offset is the input offset of the next unread byte.
func (s *scanner) offset() int64 { return s.base + int64(s.pos) }

func (s *scanner) errorf(format string, args ...any) error {
	return &syntaxError{offset: s.offset(), msg: fmt.Sprintf(format, args...)}
}

// fill reports whether an unread byte is available, reading more when the
// buffer is used up. It is split from refill so that it inlines: the scanner
// calls it for every token.
func (s *scanner) fill() bool {
	return s.pos < s.end || s.refill()
}

// refill discards consumed bytes and reads more. It reports whether any
// unread byte is available.
func (s *scanner) refill() bool {
	if s.pos < s.end {
		return true
	}
	s.base += int64(s.end)
	s.pos, s.end = 0, 0
	for s.rerr == nil {
		n, err := s.r.Read(s.buf)
		s.end = n
		if err != nil {
			s.rerr = err
		}
		if n > 0 {
			return true
		}
	}
	return false
}

// eofErr is the error for running out of input: errEOF for a clean end of
// the stream, a wrapped read error otherwise.
func (s *scanner) eofErr() error {
	if s.rerr == nil || s.rerr == io.EOF {
		return errEOF
	}
	if errors.Is(s.rerr, io.ErrUnexpectedEOF) {
		// A truncated gzip member ends the same way a truncated file does.
		return errEOF
	}
	return fmt.Errorf("read at byte %d: %w", s.offset(), s.rerr)
}

// peek skips whitespace and returns the next byte without consuming it.
func (s *scanner) peek() (byte, error) {
	// Most tokens follow their neighbour directly or after one space; the
	// fast path inlines, and the loop handles the rest.
	if s.pos < s.end {
		if c := s.buf[s.pos]; c > ' ' {
			return c, nil
		}
	}
	return s.peekSlow()
}

func (s *scanner) peekSlow() (byte, error) {
	for {
		if !s.fill() {
			return 0, s.eofErr()
		}
		for s.pos < s.end {
			c := s.buf[s.pos]
			if c != ' ' && c != '\n' && c != '\r' && c != '\t' {
				return c, nil
			}
			s.pos++
		}
	}
}

// expect consumes c after optional whitespace.
func (s *scanner) expect(c byte) error {
	got, err := s.peek()
	if err != nil {
		return err
	}
	if got != c {
		return s.errorf("expected %q, found %q", c, got)
	}
	s.pos++
	return nil
}

// more is called inside an object or array after a member: it consumes a
// comma and reports true, or consumes the closing byte and reports false.
func (s *scanner) more(closing byte) (bool, error) {
	c, err := s.peek()
	if err != nil {
		return false, err
	}
	switch c {
	case ',':
		s.pos++
		return true, nil
	case closing:
		s.pos++
		return false, nil
	}
	return false, s.errorf("expected ',' or %q, found %q", closing, c)
}

// openObject consumes the '{' when the next value is an object and reports
// whether it was; any other value is skipped whole.
func (s *scanner) openObject() (bool, error) {
	c, err := s.peek()
	if err != nil {
		return false, err
	}
	if c != '{' {
		return false, s.skipValue()
	}
	s.pos++
	return true, nil
}

// first is called right after an opening brace or bracket: it reports false
// and consumes the closing byte when the container is empty.
func (s *scanner) first(closing byte) (bool, error) {
	c, err := s.peek()
	if err != nil {
		return false, err
	}
	if c == closing {
		s.pos++
		return false, nil
	}
	return true, nil
}

// key reads an object member's key into dst and the ':' after it. Objects
// are read as
//
//	more, err := s.first('}')
//	for ; more && err == nil; more, err = s.more('}') {
//		if key, err = s.key(key); err != nil { … }
//		… consume the value …
//	}
func (s *scanner) key(dst []byte) ([]byte, error) {
	dst, err := s.readString(dst[:0])
	if err != nil {
		return dst, err
	}
	return dst, s.expect(':')
}

// member moves to the next member of an object, after its opening brace
// (first) or after a member's value. It reports false, having consumed the
// closing brace, when the object ends; otherwise it returns the key, having
// consumed it and the colon after it. The key is valid until the next read.
// It is first, more and key in one call, which matters because trace events
// are mostly keys: most members are read by memberInBuf without a refill or
// a function call per token.
func (s *scanner) member(first bool) (key []byte, ok bool, err error) {
	if key, ok, done := s.memberInBuf(first); done {
		return key, ok, nil
	}
	if first {
		ok, err = s.first('}')
	} else {
		ok, err = s.more('}')
	}
	if !ok || err != nil {
		return nil, ok, err
	}
	s.keyBuf, err = s.key(s.keyBuf)
	return s.keyBuf, true, err
}

// maxInBufKey is the longest key memberInBuf reads; Kineto's are shorter.
const maxInBufKey = 64

// memberInBuf is member for the common case: the separator, a key without
// escapes and its colon all in the buffer. done is false, with nothing
// consumed, for anything else, which member then reads the general way
// (errors included, so their offsets are the same).
func (s *scanner) memberInBuf(first bool) (key []byte, ok, done bool) {
	b := s.buf[s.pos:s.end]
	i := skipSpace(b, 0)
	if i == len(b) {
		return nil, false, false
	}
	switch c := b[i]; {
	case c == '}':
		s.pos += i + 1
		return nil, false, true
	case first:
	case c == ',':
		i = skipSpace(b, i+1)
	default:
		return nil, false, false
	}
	if i == len(b) || b[i] != '"' {
		return nil, false, false
	}
	i++
	start := i
	for ; i < len(b) && i-start <= maxInBufKey; i++ {
		if c := b[i]; c == '"' {
			break
		} else if c == '\\' {
			return nil, false, false
		}
	}
	if i >= len(b) || b[i] != '"' {
		return nil, false, false
	}
	key = b[start:i]
	i = skipSpace(b, i+1)
	if i == len(b) || b[i] != ':' {
		return nil, false, false
	}
	s.pos += skipSpace(b, i+1)
	return key, true, true
}

// skipSpace returns the index of the first byte at or after i in b that is
// not JSON whitespace, or len(b).
func skipSpace(b []byte, i int) int {
	for i < len(b) {
		if c := b[i]; c != ' ' && c != '\n' && c != '\r' && c != '\t' {
			break
		}
		i++
	}
	return i
}

// maxStringLen caps how much of one string is kept. C++ kernel names run to
// a few kilobytes; the cap keeps a hostile multi-megabyte "name" from
// costing memory. The rest of the string is read and dropped.
const maxStringLen = 64 << 10

// shortString is how far stringBody and plainStringEnd look byte by byte
// for the closing quote before they call IndexByte: phases, categories and
// most skipped strings are shorter.
const shortString = 16

// readString consumes a JSON string and appends its decoded contents to dst,
// keeping at most maxStringLen bytes of it.
func (s *scanner) readString(dst []byte) ([]byte, error) {
	if err := s.expect('"'); err != nil {
		return dst, err
	}
	return s.stringBody(dst)
}

// stringBody is readString after the opening quote.
func (s *scanner) stringBody(dst []byte) ([]byte, error) {
	// Keys, phases and categories are short: a byte loop finds their end
	// sooner than the two IndexByte calls below, which pay off on names.
	seg := s.buf[s.pos:s.end]
	for i, c := range seg[:min(len(seg), shortString)] {
		if c == '"' {
			s.pos += i + 1
			return append(dst, seg[:i]...), nil
		}
		if c == '\\' {
			break
		}
	}
	limit := len(dst) + maxStringLen
	for {
		if len(dst) > limit {
			// Each pass appends at most one buffer, so dst stays bounded.
			dst = dst[:limit]
		}
		if !s.fill() {
			return dst, s.eofErr()
		}
		seg := s.buf[s.pos:s.end]
		// Look for a backslash only before the closing quote: searching the
		// whole buffer for each string would cost O(buffer) per string.
		q := bytes.IndexByte(seg, '"')
		head := seg
		if q >= 0 {
			head = seg[:q]
		}
		bs := bytes.IndexByte(head, '\\')
		if bs < 0 {
			if q >= 0 {
				dst = append(dst, seg[:q]...)
				s.pos += q + 1
				return dst[:min(len(dst), limit)], nil
			}
			dst = append(dst, seg...)
			s.pos = s.end
			continue
		}
		// An escape comes first: copy up to it, then decode it.
		dst = append(dst, seg[:bs]...)
		s.pos += bs + 1
		var err error
		if dst, err = s.readEscape(dst); err != nil {
			return dst, err
		}
	}
}

// readByte consumes one byte.
func (s *scanner) readByte() (byte, error) {
	if !s.fill() {
		return 0, s.eofErr()
	}
	c := s.buf[s.pos]
	s.pos++
	return c, nil
}

// readEscape decodes the escape after a backslash.
func (s *scanner) readEscape(dst []byte) ([]byte, error) {
	c, err := s.readByte()
	if err != nil {
		return dst, err
	}
	switch c {
	case '"', '\\', '/':
		return append(dst, c), nil
	case 'b':
		return append(dst, '\b'), nil
	case 'f':
		return append(dst, '\f'), nil
	case 'n':
		return append(dst, '\n'), nil
	case 'r':
		return append(dst, '\r'), nil
	case 't':
		return append(dst, '\t'), nil
	case 'u':
		r, err := s.readHex4()
		if err != nil {
			return dst, err
		}
		if r >= 0xD800 && r < 0xDC00 {
			// A high surrogate should be followed by \uDC00–\uDFFF; anything
			// else decodes as the replacement character, as encoding/json does.
			if c1, _ := s.peekRaw(); c1 == '\\' {
				s.pos++
				if c2, err := s.readByte(); err != nil {
					return dst, err
				} else if c2 == 'u' {
					r2, err := s.readHex4()
					if err != nil {
						return dst, err
					}
					if r2 >= 0xDC00 && r2 < 0xE000 {
						return utf8.AppendRune(dst, (r-0xD800)<<10|(r2-0xDC00)+0x10000), nil
					}
					dst = utf8.AppendRune(dst, utf8.RuneError)
					return utf8.AppendRune(dst, r2), nil
				} else {
					dst = utf8.AppendRune(dst, utf8.RuneError)
					s.pos-- // re-read the escape letter as a fresh escape
					return s.readEscape(dst)
				}
			}
			return utf8.AppendRune(dst, utf8.RuneError), nil
		}
		return utf8.AppendRune(dst, r), nil
	}
	return dst, s.errorf("invalid escape '\\%c' in string", c)
}

// peekRaw returns the next byte without skipping whitespace.
func (s *scanner) peekRaw() (byte, bool) {
	if !s.fill() {
		return 0, false
	}
	return s.buf[s.pos], true
}

func (s *scanner) readHex4() (rune, error) {
	var r rune
	for range 4 {
		c, err := s.readByte()
		if err != nil {
			return 0, err
		}
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, s.errorf("invalid \\u escape")
		}
	}
	return r, nil
}

// skipStringBody consumes the rest of a string whose opening quote is
// already consumed. It carries the escape state across refills.
func (s *scanner) skipStringBody() error {
	esc := false
	for {
		if !s.fill() {
			return s.eofErr()
		}
		seg := s.buf[s.pos:s.end]
		if !esc {
			// Fast path: no backslash before the closing quote.
			q := bytes.IndexByte(seg, '"')
			if q >= 0 && bytes.IndexByte(seg[:q], '\\') < 0 {
				s.pos += q + 1
				return nil
			}
			if q < 0 && bytes.IndexByte(seg, '\\') < 0 {
				s.pos = s.end
				continue
			}
		}
		for i, c := range seg {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				s.pos += i + 1
				return nil
			}
		}
		s.pos = s.end
	}
}

// structural marks the bytes that matter while skipping a container.
var structural = [256]bool{'"': true, '{': true, '}': true, '[': true, ']': true}

// skipValue consumes one JSON value of any type. Containers are skipped with a
// depth counter; their contents are checked only for string and bracket
// structure, which is all that is needed to find where they end.
func (s *scanner) skipValue() error {
	if s.skipInBuf() {
		return nil
	}
	c, err := s.peek()
	if err != nil {
		return err
	}
	switch c {
	case '"':
		s.pos++
		return s.skipStringBody()
	case '{', '[':
		s.pos++
		depth := 1
	refill:
		for depth > 0 {
			if !s.fill() {
				return s.eofErr()
			}
			// Walk the buffered bytes; strings without escapes that end
			// in the buffer are stepped over here, the rest by
			// skipStringBody, which carries its state across refills.
			buf := s.buf[s.pos:s.end]
			i := 0
			for depth > 0 && i < len(buf) {
				c := buf[i]
				i++
				if !structural[c] {
					continue
				}
				switch c {
				case '"':
					if q := plainStringEnd(buf[i:]); q >= 0 {
						i += q + 1
						continue
					}
					s.pos += i
					if err := s.skipStringBody(); err != nil {
						return err
					}
					continue refill
				case '{', '[':
					depth++
				default:
					depth--
				}
			}
			s.pos += i
		}
		return nil
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return s.skipNumber()
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	}
	return s.errorf("invalid character %q looking for a value", c)
}

// skipInBuf is skipValue's fast path: it skips a number, or a string
// without escapes, that lies wholly in the buffer at the read position and
// reports true; anything else is left, unconsumed, to skipValue.
func (s *scanner) skipInBuf() bool {
	b := s.buf[s.pos:s.end]
	if len(b) == 0 {
		return false
	}
	switch c := b[0]; {
	case c == '"':
		q := plainStringEnd(b[1:])
		if q < 0 {
			return false
		}
		s.pos += q + 2
		return true
	case c == '-' || c-'0' <= 9:
		i := 1
		for i < len(b) && numberByte[b[i]] {
			i++
		}
		if i == len(b) {
			return false
		}
		s.pos += i
		return true
	}
	return false
}

// plainStringEnd returns the index in b of the quote that closes a string
// whose body starts at b[0], or -1 when a backslash comes first or b holds
// no quote.
func plainStringEnd(b []byte) int {
	// A byte loop for short strings, IndexByte for long ones.
	for i, c := range b[:min(len(b), shortString)] {
		if c == '"' {
			return i
		}
		if c == '\\' {
			return -1
		}
	}
	q := bytes.IndexByte(b, '"')
	if q < 0 || bytes.IndexByte(b[:q], '\\') >= 0 {
		return -1
	}
	return q
}

func (s *scanner) literal(word string) error {
	for i := 0; i < len(word); i++ {
		c, err := s.readByte()
		if err != nil {
			return err
		}
		if c != word[i] {
			return s.errorf("invalid literal, expected %q", word)
		}
	}
	return nil
}

// numberByte marks the bytes that can appear in a JSON number.
var numberByte = func() (t [256]bool) {
	for _, c := range []byte("0123456789-+.eE") {
		t[c] = true
	}
	return t
}()

// numberInBuf returns the text of the number at the read position when it
// starts with '-' or a digit and all of it, and the byte after it, are in
// the buffer, and consumes it; ok is false, with nothing consumed, when the
// caller must peek and readNumber (whitespace first, another value, a
// number that runs to the end of the buffer or is too long). The text
// aliases the buffer: it is valid until the next read.
func (s *scanner) numberInBuf() (text []byte, ok bool) {
	seg := s.buf[s.pos:s.end]
	if len(seg) == 0 || seg[0] != '-' && seg[0]-'0' > 9 {
		return nil, false
	}
	i := 0
	for i < len(seg) && numberByte[seg[i]] {
		i++
	}
	if i == 0 || i == len(seg) || i > maxNumberLen {
		return nil, false
	}
	s.pos += i
	return seg[:i], true
}

// readNumber consumes a number's text and appends it to dst, or reports
// errNumberTooLong after consuming it entirely (so the caller can go on).
func (s *scanner) readNumber(dst []byte) ([]byte, error) {
	n := 0
	for {
		if !s.fill() {
			// A number may legitimately end the input only in a bare value;
			// inside a trace it never does.
			return dst, s.eofErr()
		}
		buf := s.buf[s.pos:s.end]
		i := 0
		for i < len(buf) && numberByte[buf[i]] {
			i++
		}
		if n+i <= maxNumberLen {
			dst = append(dst, buf[:i]...)
		}
		n += i
		s.pos += i
		if i < len(buf) {
			break
		}
	}
	if n == 0 {
		return dst, s.errorf("expected a number")
	}
	if n > maxNumberLen {
		return dst, errNumberTooLong
	}
	return dst, nil
}

// skipNumber consumes a number's text without copying it. Number bytes are
// validated only by the value's neighbours: a skipped value is never used.
func (s *scanner) skipNumber() error {
	for {
		if !s.fill() {
			return s.eofErr()
		}
		buf := s.buf[s.pos:s.end]
		i := 0
		for i < len(buf) && numberByte[buf[i]] {
			i++
		}
		s.pos += i
		if i < len(buf) {
			return nil
		}
	}
}

var errNumberTooLong = errors.New("number too long")
