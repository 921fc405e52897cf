package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/canifinetune/canifinetune/internal/checked"
)

// MaxHeaderLength bounds the JSON header a file may declare. The reference
// implementation (huggingface/safetensors) refuses headers over 100 MB; the
// largest real checkpoints have headers of a few hundred kilobytes. The bound
// is checked before allocating, so a corrupt or hostile length such as 2^60
// costs nothing.
const MaxHeaderLength = 100 << 20

// PrefixLength is the size of the little-endian header length that starts
// every safetensors file.
const PrefixLength = 8

// MaxDataLength bounds the end of every tensor's data: a file's size is an
// int64, so an offset past MaxInt64 less the largest prefix and header is in
// no file. Refusing it while parsing also keeps PrefixLength+N+end, the size
// the file must have, from wrapping to a small number that a file of a few
// bytes would pass.
const MaxDataLength = math.MaxInt64 - PrefixLength - MaxHeaderLength

// metadataKey is the reserved header entry that holds free-form string
// metadata (for example {"format": "pt"}) instead of a tensor.
const metadataKey = "__metadata__"

// Sentinel errors. Every error this package returns wraps one of them, with
// the tensor and field that were wrong.
var (
	// ErrHeaderTooLarge: the declared header length exceeds MaxHeaderLength.
	ErrHeaderTooLarge = errors.New("safetensors header too large")
	// ErrTruncated: the bytes given end before the header (or the file before
	// the data the header describes). A caller reading over the network can
	// fetch more and try again.
	ErrTruncated = errors.New("safetensors header truncated")
	// ErrMalformed: the header is not valid safetensors: not a JSON object,
	// a missing or mistyped field, bad offsets, an overflowing shape.
	ErrMalformed = errors.New("malformed safetensors header")
	// ErrUnknownDType: a tensor has a dtype this package does not know, so its
	// byte size (and whether its offsets are right) cannot be checked.
	ErrUnknownDType = errors.New("unknown safetensors dtype")
)

// Tensor is one entry of the header.
type Tensor struct {
	Name  string
	DType DType
	Shape []uint64
	// Begin and End are the byte range of the tensor in the data section,
	// which starts right after the header (at PrefixLength+Header.Length).
	Begin, End uint64
	// Elements is the product of Shape (1 for a scalar).
	Elements uint64
	// Bytes is the stored size, End-Begin, checked against Elements×dtype.
	Bytes uint64
}

// Header is a parsed safetensors header.
type Header struct {
	// Length is N, the size in bytes of the JSON header.
	Length uint64
	// Metadata is the optional "__metadata__" object; nil when absent.
	Metadata map[string]string
	// Tensors are sorted by name, so output built from them is stable.
	Tensors []Tensor
	// DataLength is the end of the last tensor: the size of the data section
	// the header describes.
	DataLength uint64
}

// FileSize is the size of a file holding exactly this header and its data.
// It refuses a sum that would wrap, which a header from ParseHeader cannot
// give but one whose Length was set from elsewhere (a cache) could.
func (h Header) FileSize() (uint64, error) {
	size, ok := checked.Add(PrefixLength, h.Length)
	if ok {
		size, ok = checked.Add(size, h.DataLength)
	}
	if !ok || size > math.MaxInt64 {
		return 0, fmt.Errorf("%w: tensor %q: a header of %d bytes with data_offsets ending at %d makes a file larger than any file can be",
			ErrMalformed, h.lastTensor(), h.Length, h.DataLength)
	}
	return size, nil
}

// lastTensor names the tensor whose data ends last, for errors about the
// end of the data section.
func (h Header) lastTensor() string {
	last := ""
	for _, t := range h.Tensors {
		if t.End == h.DataLength {
			last = t.Name
		}
	}
	return last
}

// HeaderLength decodes the 8-byte little-endian length that starts a file and
// refuses one over MaxHeaderLength or too short to hold a JSON object.
func HeaderLength(first8 []byte) (uint64, error) {
	if len(first8) < PrefixLength {
		return 0, fmt.Errorf("%w: need %d bytes for the header length, have %d", ErrTruncated, PrefixLength, len(first8))
	}
	n := binary.LittleEndian.Uint64(first8[:PrefixLength])
	if n > MaxHeaderLength {
		return 0, fmt.Errorf("%w: declared length %d bytes, limit %d", ErrHeaderTooLarge, n, MaxHeaderLength)
	}
	if n < 2 {
		return 0, fmt.Errorf("%w: declared header length %d cannot hold a JSON object", ErrMalformed, n)
	}
	return n, nil
}

// ParseHeader parses the header at the start of prefix, which must hold at
// least the first PrefixLength+N bytes of the file; bytes after the header
// (the start of the data, when a caller read speculatively) are ignored. A
// prefix that ends inside the header gives ErrTruncated, so a caller can
// fetch PrefixLength+N bytes and call again.
func ParseHeader(prefix []byte) (Header, error) {
	n, err := HeaderLength(prefix)
	if err != nil {
		return Header{}, err
	}
	if uint64(len(prefix)-PrefixLength) < n {
		return Header{}, fmt.Errorf("%w: header is %d bytes, have %d", ErrTruncated, n, len(prefix)-PrefixLength)
	}
	return ParseHeaderJSON(prefix[PrefixLength : PrefixLength+n])
}

// ReadHeader reads and parses the header of a file of fileSize bytes through
// r, reading only the header, never the tensor data. It also checks that the
// data the header describes fits in the file. A negative fileSize means the
// size is unknown and skips that check.
func ReadHeader(r io.ReaderAt, fileSize int64) (Header, error) {
	var first8 [PrefixLength]byte
	if _, err := r.ReadAt(first8[:], 0); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return Header{}, fmt.Errorf("%w: file shorter than the %d-byte header length", ErrTruncated, PrefixLength)
		}
		return Header{}, fmt.Errorf("read safetensors header length: %w", err)
	}
	n, err := HeaderLength(first8[:])
	if err != nil {
		return Header{}, err
	}
	if fileSize >= 0 && PrefixLength+n > uint64(fileSize) {
		return Header{}, fmt.Errorf("%w: header of %d bytes does not fit in a file of %d bytes", ErrTruncated, n, fileSize)
	}
	buf := make([]byte, n) // bounded by MaxHeaderLength above
	if _, err := r.ReadAt(buf, PrefixLength); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return Header{}, fmt.Errorf("%w: file ends inside the %d-byte header", ErrTruncated, n)
		}
		return Header{}, fmt.Errorf("read safetensors header: %w", err)
	}
	h, err := ParseHeaderJSON(buf)
	if err != nil {
		return Header{}, err
	}
	if fileSize >= 0 {
		if err := h.CheckFileSize(uint64(fileSize)); err != nil {
			return Header{}, err
		}
	}
	return h, nil
}

// CheckFileSize reports whether a file of size bytes holds all the data the
// header describes. Trailing bytes after the last tensor are allowed: they do
// not change any count.
func (h Header) CheckFileSize(size uint64) error {
	need, err := h.FileSize()
	if err != nil {
		return err
	}
	if need > size {
		return fmt.Errorf("%w: tensor %q: data_offsets end %d runs past the end of the file (data section is %d bytes, file %d bytes)",
			ErrTruncated, h.lastTensor(), h.DataLength, size-min(size, PrefixLength+h.Length), size)
	}
	return nil
}

// rawTensor mirrors one header entry. Pointers tell a missing field from a
// zero one.
type rawTensor struct {
	DType       *string   `json:"dtype"`
	Shape       *[]uint64 `json:"shape"`
	DataOffsets *[]uint64 `json:"data_offsets"`
}

// ParseHeaderJSON parses the N-byte JSON header itself (without the 8-byte
// length), as stored by a cache that kept only the header.
func ParseHeaderJSON(data []byte) (Header, error) {
	if uint64(len(data)) > MaxHeaderLength {
		return Header{}, fmt.Errorf("%w: %d bytes, limit %d", ErrHeaderTooLarge, len(data), MaxHeaderLength)
	}
	h := Header{Length: uint64(len(data))}
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return Header{}, fmt.Errorf("%w: not JSON: %v", ErrMalformed, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return Header{}, fmt.Errorf("%w: header is not a JSON object (starts with %v)", ErrMalformed, tok)
	}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return Header{}, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		name, ok := tok.(string)
		if !ok { // unreachable with encoding/json, kept so bad input cannot panic
			return Header{}, fmt.Errorf("%w: object key %v is not a string", ErrMalformed, tok)
		}
		// A duplicate name would let two entries claim one tensor; the JSON
		// decoder would silently keep the last, so refuse it here.
		if seen[name] {
			return Header{}, fmt.Errorf("%w: tensor %q appears twice", ErrMalformed, name)
		}
		seen[name] = true
		if name == metadataKey {
			var md map[string]string
			if err := dec.Decode(&md); err != nil {
				return Header{}, fmt.Errorf("%w: %s must be an object of strings: %v", ErrMalformed, metadataKey, err)
			}
			if md == nil {
				md = map[string]string{}
			}
			h.Metadata = md
			continue
		}
		var raw rawTensor
		if err := dec.Decode(&raw); err != nil {
			return Header{}, fmt.Errorf("%w: tensor %q: %v", ErrMalformed, name, jsonFieldError(err))
		}
		t, err := buildTensor(name, raw)
		if err != nil {
			return Header{}, err
		}
		h.Tensors = append(h.Tensors, t)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return Header{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	// Writers pad the header with spaces to align the data; anything else
	// after the object means the length or the JSON is wrong.
	if rest := data[dec.InputOffset():]; len(bytes.TrimRight(rest, " \t\r\n\x00")) != 0 {
		return Header{}, fmt.Errorf("%w: %d bytes of trailing data after the header object", ErrMalformed, len(rest))
	}
	if err := checkOffsets(h.Tensors); err != nil {
		return Header{}, err
	}
	for _, t := range h.Tensors {
		h.DataLength = max(h.DataLength, t.End)
	}
	slices.SortFunc(h.Tensors, func(a, b Tensor) int { return strings.Compare(a.Name, b.Name) })
	return h, nil
}

// jsonFieldError shortens encoding/json's type errors to the field and the
// value that was wrong.
func jsonFieldError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("field %q: %s is not a valid %s", te.Field, te.Value, te.Type)
	}
	return err
}

func buildTensor(name string, raw rawTensor) (Tensor, error) {
	switch {
	case raw.DType == nil:
		return Tensor{}, fmt.Errorf("%w: tensor %q: missing field \"dtype\"", ErrMalformed, name)
	case raw.Shape == nil:
		return Tensor{}, fmt.Errorf("%w: tensor %q: missing field \"shape\"", ErrMalformed, name)
	case raw.DataOffsets == nil:
		return Tensor{}, fmt.Errorf("%w: tensor %q: missing field \"data_offsets\"", ErrMalformed, name)
	case len(*raw.DataOffsets) != 2:
		return Tensor{}, fmt.Errorf("%w: tensor %q: field \"data_offsets\" has %d values, want [begin, end]", ErrMalformed, name, len(*raw.DataOffsets))
	}
	dt := DType(*raw.DType)
	if !dt.Known() {
		return Tensor{}, fmt.Errorf("%w: tensor %q: dtype %q", ErrUnknownDType, name, *raw.DType)
	}
	t := Tensor{Name: name, DType: dt, Shape: *raw.Shape, Begin: (*raw.DataOffsets)[0], End: (*raw.DataOffsets)[1]}
	if t.Shape == nil {
		t.Shape = []uint64{}
	}
	t.Elements = 1
	for _, d := range t.Shape {
		var ok bool
		if t.Elements, ok = checked.Mul(t.Elements, d); !ok {
			return Tensor{}, fmt.Errorf("%w: tensor %q: shape %v: element count overflows 64 bits", ErrMalformed, name, t.Shape)
		}
	}
	nbits, ok := checked.Mul(t.Elements, uint64(dt.Bits()))
	if !ok {
		return Tensor{}, fmt.Errorf("%w: tensor %q: shape %v of %s: byte size overflows 64 bits", ErrMalformed, name, t.Shape, dt)
	}
	// Sub-byte dtypes (F4, F6) pack several elements per byte; the reference
	// implementation refuses a tensor that would end in a partial byte.
	if nbits%8 != 0 {
		return Tensor{}, fmt.Errorf("%w: tensor %q: shape %v of %s is %d bits, not a whole number of bytes", ErrMalformed, name, t.Shape, dt, nbits)
	}
	want := nbits / 8
	if t.End < t.Begin {
		return Tensor{}, fmt.Errorf("%w: tensor %q: field \"data_offsets\" [%d, %d] ends before it begins", ErrMalformed, name, t.Begin, t.End)
	}
	if t.End > MaxDataLength {
		return Tensor{}, fmt.Errorf("%w: tensor %q: field \"data_offsets\" [%d, %d] ends past the largest data section a file can hold (%d bytes)",
			ErrMalformed, name, t.Begin, t.End, uint64(MaxDataLength))
	}
	t.Bytes = t.End - t.Begin
	if t.Bytes != want {
		return Tensor{}, fmt.Errorf("%w: tensor %q: field \"data_offsets\" [%d, %d] spans %d bytes, but shape %v of %s needs %d",
			ErrMalformed, name, t.Begin, t.End, t.Bytes, t.Shape, dt, want)
	}
	return t, nil
}

// checkOffsets refuses tensors whose byte ranges overlap: two tensors sharing
// bytes would be counted twice. Gaps are allowed; they change no count.
func checkOffsets(ts []Tensor) error {
	order := make([]int, len(ts))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		if c := cmp.Compare(ts[a].Begin, ts[b].Begin); c != 0 {
			return c
		}
		return cmp.Compare(ts[a].End, ts[b].End)
	})
	var prev *Tensor
	for _, i := range order {
		t := &ts[i]
		if t.Bytes == 0 {
			continue // an empty tensor occupies no bytes and overlaps nothing
		}
		if prev != nil && t.Begin < prev.End {
			return fmt.Errorf("%w: tensor %q: data_offsets [%d, %d] overlap tensor %q [%d, %d]",
				ErrMalformed, t.Name, t.Begin, t.End, prev.Name, prev.Begin, prev.End)
		}
		prev = t
	}
	return nil
}
