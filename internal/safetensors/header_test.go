package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// file builds a safetensors file from a JSON header and dataLen zero bytes.
func file(header string, dataLen int) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.WriteString(header)
	b.Write(make([]byte, dataLen))
	return b.Bytes()
}

// lengthOnly is an 8-byte prefix declaring a header of n bytes.
func lengthOnly(n uint64) []byte {
	return binary.LittleEndian.AppendUint64(nil, n)
}

func TestParseHeader(t *testing.T) {
	hdr := `{"__metadata__":{"format":"pt"},` +
		`"b.weight":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},` +
		`"a.bias":{"dtype":"F32","shape":[3],"data_offsets":[12,24]},` +
		`"scalar":{"dtype":"I64","shape":[],"data_offsets":[24,32]},` +
		`"empty":{"dtype":"F16","shape":[0,4],"data_offsets":[32,32]},` +
		`"fp4":{"dtype":"F4","shape":[4,3],"data_offsets":[32,38]},` +
		`"fp6":{"dtype":"F6_E2M3","shape":[4],"data_offsets":[38,41]},` +
		`"fp8":{"dtype":"F8_E4M3","shape":[5],"data_offsets":[41,46]}}    `
	got, err := ParseHeader(file(hdr, 46))
	if err != nil {
		t.Fatal(err)
	}
	want := Header{
		Length:   uint64(len(hdr)),
		Metadata: map[string]string{"format": "pt"},
		Tensors: []Tensor{
			{Name: "a.bias", DType: F32, Shape: []uint64{3}, Begin: 12, End: 24, Elements: 3, Bytes: 12},
			{Name: "b.weight", DType: BF16, Shape: []uint64{2, 3}, Begin: 0, End: 12, Elements: 6, Bytes: 12},
			{Name: "empty", DType: F16, Shape: []uint64{0, 4}, Begin: 32, End: 32, Elements: 0, Bytes: 0},
			{Name: "fp4", DType: F4, Shape: []uint64{4, 3}, Begin: 32, End: 38, Elements: 12, Bytes: 6},
			{Name: "fp6", DType: F6E2M3, Shape: []uint64{4}, Begin: 38, End: 41, Elements: 4, Bytes: 3},
			{Name: "fp8", DType: F8E4M3, Shape: []uint64{5}, Begin: 41, End: 46, Elements: 5, Bytes: 5},
			{Name: "scalar", DType: I64, Shape: []uint64{}, Begin: 24, End: 32, Elements: 1, Bytes: 8},
		},
		DataLength: 46,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseHeader (-want +got):\n%s", diff)
	}
	if size, err := got.FileSize(); err != nil || size != uint64(8+len(hdr)+46) {
		t.Errorf("FileSize = %d, %v; want %d", size, err, 8+len(hdr)+46)
	}
}

// TestEveryDType checks the element width of every dtype through the offsets
// the parser accepts: a wrong width would make the span check fail.
func TestEveryDType(t *testing.T) {
	widths := map[string]int{
		"F64": 64, "F32": 32, "F16": 16, "BF16": 16, "I64": 64, "I32": 32, "I16": 16, "I8": 8,
		"U8": 8, "BOOL": 8, "U16": 16, "U32": 32, "U64": 64, "C64": 64,
		"F8_E4M3": 8, "F8_E5M2": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "F8_E8M0": 8,
		"F6_E2M3": 6, "F6_E3M2": 6, "F4": 4,
	}
	if len(widths) != len(dtypeBits) {
		t.Errorf("test covers %d dtypes, package knows %d", len(widths), len(dtypeBits))
	}
	for name, w := range widths {
		const n = 8 // elements: a whole number of bytes for every width
		hdr := fmt.Sprintf(`{"t":{"dtype":%q,"shape":[%d],"data_offsets":[0,%d]}}`, name, n, n*w/8)
		h, err := ParseHeader(file(hdr, n*w/8))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if h.Tensors[0].Bytes != uint64(n*w/8) || h.Tensors[0].Elements != n {
			t.Errorf("%s: got %d bytes, %d elements; want %d, %d", name, h.Tensors[0].Bytes, h.Tensors[0].Elements, n*w/8, n)
		}
		// One byte more must be refused, proving the width is checked.
		bad := fmt.Sprintf(`{"t":{"dtype":%q,"shape":[%d],"data_offsets":[0,%d]}}`, name, n, n*w/8+1)
		if _, err := ParseHeader(file(bad, n*w/8+1)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s with a wrong span: err = %v, want ErrMalformed", name, err)
		}
	}
}

func TestParseHeaderRefuses(t *testing.T) {
	tests := []struct {
		name   string
		input  []byte
		target error
		says   []string // substrings the message must contain
	}{
		{"2^60 length", lengthOnly(1 << 60), ErrHeaderTooLarge, []string{"1152921504606846976"}},
		{"just over the bound", lengthOnly(MaxHeaderLength + 1), ErrHeaderTooLarge, nil},
		{"short prefix", []byte{1, 2, 3}, ErrTruncated, []string{"8 bytes"}},
		{"prefix ends inside header", append(lengthOnly(100), `{"a":`...), ErrTruncated, []string{"100"}},
		{"zero length", lengthOnly(0), ErrMalformed, nil},
		{"array", file(`[1,2]`, 0), ErrMalformed, []string{"not a JSON object"}},
		{"string", file(`"x"`, 0), ErrMalformed, []string{"not a JSON object"}},
		{"not json", file(`{{`, 0), ErrMalformed, nil},
		{"trailing garbage", file(`{} {}`, 0), ErrMalformed, []string{"trailing"}},
		{"unknown dtype", file(`{"w":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,2]}}`, 2), ErrUnknownDType, []string{`"w"`, "Q4_K"}},
		{"missing dtype", file(`{"w":{"shape":[2],"data_offsets":[0,2]}}`, 2), ErrMalformed, []string{`"w"`, "dtype"}},
		{"missing shape", file(`{"w":{"dtype":"U8","data_offsets":[0,2]}}`, 2), ErrMalformed, []string{`"w"`, "shape"}},
		{"missing offsets", file(`{"w":{"dtype":"U8","shape":[2]}}`, 2), ErrMalformed, []string{`"w"`, "data_offsets"}},
		{"three offsets", file(`{"w":{"dtype":"U8","shape":[2],"data_offsets":[0,1,2]}}`, 2), ErrMalformed, []string{`"w"`, "data_offsets"}},
		{"negative dim", file(`{"w":{"dtype":"U8","shape":[-2],"data_offsets":[0,2]}}`, 2), ErrMalformed, []string{`"w"`, "shape", "-2"}},
		{"string dtype field", file(`{"w":{"dtype":7,"shape":[2],"data_offsets":[0,2]}}`, 2), ErrMalformed, []string{`"w"`, "dtype"}},
		{"tensor not an object", file(`{"w":[1]}`, 0), ErrMalformed, []string{`"w"`}},
		{"end before begin", file(`{"w":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}}`, 4), ErrMalformed, []string{`"w"`, "ends before it begins"}},
		{"span mismatch", file(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 4), ErrMalformed, []string{`"w"`, "needs 8"}},
		{"overlap", file(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}`, 6), ErrMalformed, []string{"overlap", `"a"`, `"b"`}},
		{"same range twice", file(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, 4), ErrMalformed, []string{"overlap"}},
		{"duplicate name", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2), ErrMalformed, []string{"twice"}},
		{"shape overflow", file(`{"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, 0), ErrMalformed, []string{`"w"`, "overflows"}},
		{"byte size overflow", file(`{"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}}`, 0), ErrMalformed, []string{`"w"`, "overflows"}},
		// An end offset no file can reach: 8+N+end would wrap uint64 and pass
		// the file-size check with a file of a few bytes.
		{"offset past any file", file(`{"w":{"dtype":"U8","shape":[8],"data_offsets":[18446744073709551600,18446744073709551608]}}`, 0), ErrMalformed, []string{`"w"`, "18446744073709551608"}},
		{"offset just past the bound", file(fmt.Sprintf(`{"w":{"dtype":"U8","shape":[1],"data_offsets":[%d,%d]}}`, uint64(MaxDataLength), uint64(MaxDataLength)+1), 0), ErrMalformed, []string{`"w"`, fmt.Sprint(uint64(MaxDataLength) + 1)}},
		{"partial byte", file(`{"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}`, 2), ErrMalformed, []string{`"w"`, "whole number of bytes"}},
		{"metadata not strings", file(`{"__metadata__":{"n":1}}`, 0), ErrMalformed, []string{"__metadata__"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseHeader(tt.input)
			if !errors.Is(err, tt.target) {
				t.Fatalf("err = %v, want %v", err, tt.target)
			}
			for _, s := range tt.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

// TestHugeLengthDoesNotAllocate guards the bound being checked before the
// buffer for the header is made.
func TestHugeLengthDoesNotAllocate(t *testing.T) {
	prefix := lengthOnly(1 << 60)
	allocs := testing.AllocsPerRun(10, func() {
		if _, err := ParseHeader(prefix); !errors.Is(err, ErrHeaderTooLarge) {
			t.Fatal(err)
		}
	})
	if allocs > 10 { // the error message only
		t.Errorf("ParseHeader of a 2^60 length made %v allocations", allocs)
	}
	r := &countingReader{data: prefix}
	if _, err := ReadHeader(r, -1); !errors.Is(err, ErrHeaderTooLarge) {
		t.Fatalf("ReadHeader: err = %v, want ErrHeaderTooLarge", err)
	}
	if r.read != 8 {
		t.Errorf("ReadHeader read %d bytes, want only the 8-byte length", r.read)
	}
}

type countingReader struct {
	data []byte
	read int
}

func (r *countingReader) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(r.data)) {
		return 0, io.EOF
	}
	n := copy(p, r.data[off:])
	r.read += n
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func TestReadHeader(t *testing.T) {
	hdr := `{"w":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}}`
	f := file(hdr, 8)
	r := &countingReader{data: f}
	h, err := ReadHeader(r, int64(len(f)))
	if err != nil {
		t.Fatal(err)
	}
	if h.Tensors[0].Elements != 4 {
		t.Errorf("elements = %d, want 4", h.Tensors[0].Elements)
	}
	if r.read != 8+len(hdr) {
		t.Errorf("read %d bytes, want %d: the weights must not be read", r.read, 8+len(hdr))
	}

	// The data the header describes must fit in the file.
	short := f[:len(f)-1]
	if _, err := ReadHeader(bytes.NewReader(short), int64(len(short))); !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), `"w"`) {
		t.Errorf("file one byte short: err = %v, want ErrTruncated naming the tensor", err)
	}
	// A header that runs past the file.
	if _, err := ReadHeader(bytes.NewReader(f[:20]), 20); !errors.Is(err, ErrTruncated) {
		t.Errorf("header past the file: err = %v, want ErrTruncated", err)
	}
	// Size unknown: the header alone is enough.
	if _, err := ReadHeader(bytes.NewReader(f[:8+len(hdr)]), -1); err != nil {
		t.Errorf("unknown size: %v", err)
	}
	// Empty file.
	if _, err := ReadHeader(bytes.NewReader(nil), 0); !errors.Is(err, ErrTruncated) {
		t.Errorf("empty file: err = %v, want ErrTruncated", err)
	}
}

// wrappingFile is a complete file of a few dozen bytes whose one F4 tensor
// of 2^62-2 elements ends so close to 2^64 that PrefixLength+N+end wraps to
// the file's own size.
func wrappingFile(t *testing.T) []byte {
	t.Helper()
	const elements = 1<<62 - 2
	const tmpl = `{"w":{"dtype":"F4","shape":[%d],"data_offsets":[%020d,%020d]}}`
	n := uint64(len(fmt.Sprintf(tmpl, elements, 0, 0)))
	const data = 16
	end := -(PrefixLength + n) + data // mod 2^64: 8+n+end == data
	hdr := fmt.Sprintf(tmpl, uint64(elements), end-elements/2, end)
	if uint64(len(hdr)) != n {
		t.Fatalf("header is %d bytes, planned %d", len(hdr), n)
	}
	return file(hdr, data)
}

// TestReadHeaderRefusesWrappedSize: the size check must not wrap.
func TestReadHeaderRefusesWrappedSize(t *testing.T) {
	f := wrappingFile(t)
	h, err := ReadHeader(bytes.NewReader(f), int64(len(f)))
	if err == nil {
		t.Fatalf("ReadHeader accepted a %d-byte file whose tensor ends at %d", len(f), h.DataLength)
	}
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), `"w"`) {
		t.Errorf("err = %v, want ErrMalformed naming tensor \"w\"", err)
	}
}

// TestFileSizeRefusesWrap: a header whose length came from elsewhere (a
// cache's side file) must not make FileSize wrap either.
func TestFileSizeRefusesWrap(t *testing.T) {
	h := Header{Length: math.MaxUint64 - 4, DataLength: 16, Tensors: []Tensor{{Name: "w", End: 16}}}
	if got, err := h.FileSize(); err == nil {
		t.Errorf("FileSize = %d, want an error", got)
	}
	if err := h.CheckFileSize(100); !errors.Is(err, ErrMalformed) {
		t.Errorf("CheckFileSize: err = %v, want ErrMalformed", err)
	}
}

func TestParseHeaderIgnoresBytesAfterHeader(t *testing.T) {
	hdr := `{"w":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}}`
	h, err := ParseHeader(append(file(hdr, 3), 0xff, 0xfe)) // a speculative read took data too
	if err != nil {
		t.Fatal(err)
	}
	if h.Length != uint64(len(hdr)) || h.DataLength != 3 {
		t.Errorf("Length, DataLength = %d, %d; want %d, 3", h.Length, h.DataLength, len(hdr))
	}
}
