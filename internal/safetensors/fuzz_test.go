package safetensors

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"testing"

	"github.com/canifinetune/canifinetune/internal/checked"
)

// FuzzParseHeader checks that no input panics, that every error wraps a
// sentinel, and that an accepted header is self-consistent and counts
// without wrapping.
func FuzzParseHeader(f *testing.F) {
	f.Add(file(`{"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}`, 8))
	f.Add(file(`{"a":{"dtype":"F4","shape":[4],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}`, 4))
	f.Add(file(`{}`, 0))
	f.Add(file(`[]`, 0))
	f.Add(lengthOnly(1 << 60))
	for _, s := range countSeeds {
		f.Add(file(s, 0))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ParseHeader(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTruncated) &&
				!errors.Is(err, ErrHeaderTooLarge) && !errors.Is(err, ErrUnknownDType) {
				t.Fatalf("error wraps no sentinel: %v", err)
			}
			return
		}
		if h.Length > MaxHeaderLength || uint64(len(data)) < PrefixLength+h.Length {
			t.Fatalf("accepted length %d with %d bytes of input", h.Length, len(data))
		}
		checkHeader(t, h)
		// ReadHeader over the same bytes must agree with ParseHeader.
		if _, err := ReadHeader(bytes.NewReader(data), -1); err != nil {
			t.Fatalf("ParseHeader accepted, ReadHeader refused: %v", err)
		}
		checkCount(t, h)
	})
}

// FuzzReadHeaderSize fuzzes a header together with the size of the file it
// claims to start: the bytes given, then zeros up to size (a sparse file).
// An accepted header has every tensor inside the file's data section,
// computed without wrapping; a refused one says why with a sentinel.
func FuzzReadHeaderSize(f *testing.F) {
	f.Add(file(`{"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}`, 0), int64(8+58+8))
	f.Add(file(`{"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}`, 0), int64(8+58+7))
	f.Add(file(`{"w":{"dtype":"U8","shape":[8],"data_offsets":[18446744073709551600,18446744073709551608]}}`, 0), int64(8+92))
	for _, s := range countSeeds {
		f.Add(file(s, 0), int64(math.MaxInt64))
	}
	// The file of the wrap: 133 bytes, 8+N+end ≡ 133 mod 2^64.
	f.Add(file(countSeeds[1], 16), int64(8+len(countSeeds[1])+16))
	f.Fuzz(func(t *testing.T, data []byte, size int64) {
		if size < int64(len(data)) {
			size = int64(len(data))
		}
		h, err := ReadHeader(sparseFile{data, size}, size)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTruncated) &&
				!errors.Is(err, ErrHeaderTooLarge) && !errors.Is(err, ErrUnknownDType) {
				t.Fatalf("error wraps no sentinel: %v", err)
			}
			return
		}
		checkHeader(t, h)
		// Every tensor lies inside the file: 8+N+end ≤ size, in exact
		// arithmetic.
		dataStart := new(big.Int).SetUint64(PrefixLength + h.Length)
		for _, tn := range h.Tensors {
			end := new(big.Int).Add(dataStart, new(big.Int).SetUint64(tn.End))
			if end.Cmp(big.NewInt(size)) > 0 {
				t.Fatalf("tensor %q ends at byte %s of a %d-byte file", tn.Name, end, size)
			}
		}
		checkCount(t, h)
	})
}

// countSeeds are headers at and past the bounds of the counts.
var countSeeds = []string{
	`{"w":{"dtype":"F4","shape":[4611686018427387902],"data_offsets":[0,2305843009213693951]}}`,
	`{"w":{"dtype":"F4","shape":[4611686018427387902],"data_offsets":[16140901064495857564,18446744073709551515]}}`,
	`{"a":{"dtype":"U8","shape":[999999999999999],"data_offsets":[0,999999999999999]},"b":{"dtype":"U8","shape":[2],"data_offsets":[999999999999999,1000000000000001]}}`,
	`{"q":{"dtype":"U8","shape":[600000000000000],"data_offsets":[0,600000000000000]},"q.quant_state.bitsandbytes__nf4":{"dtype":"U8","shape":[1],"data_offsets":[600000000000000,600000000000001]}}`,
	fmt.Sprintf(`{"w":{"dtype":"U8","shape":[1],"data_offsets":[%d,%d]}}`, uint64(MaxDataLength)-1, uint64(MaxDataLength)),
}

// checkHeader: every tensor of an accepted header lies inside its data
// section, and the size a file must have does not wrap.
func checkHeader(t *testing.T, h Header) {
	t.Helper()
	for _, tn := range h.Tensors {
		if tn.End < tn.Begin || tn.End-tn.Begin != tn.Bytes || tn.End > h.DataLength || tn.End > MaxDataLength || !tn.DType.Known() {
			t.Fatalf("inconsistent tensor %+v (data length %d)", tn, h.DataLength)
		}
	}
	size, err := h.FileSize()
	if err != nil {
		t.Fatalf("accepted header has no file size: %v", err)
	}
	if want := new(big.Int).SetUint64(PrefixLength + h.Length); want.Add(want, new(big.Int).SetUint64(h.DataLength)).Cmp(new(big.Int).SetUint64(size)) != 0 {
		t.Fatalf("FileSize = %d, want %s", size, want)
	}
}

// checkCount: Count either refuses with ErrMalformed or returns the exact
// totals, recomputed here in arbitrary precision, within their bounds.
func checkCount(t *testing.T, h Header) {
	t.Helper()
	c, err := Count(h)
	names := make(map[string]bool)
	for _, tn := range h.Tensors {
		names[tn.Name] = true
	}
	params, stored := new(big.Int), new(big.Int)
	for _, tn := range h.Tensors {
		stored.Add(stored, new(big.Int).SetUint64(tn.Bytes))
		switch {
		case isCompanion(tn.Name, names):
		case packedFormat(tn, names) != "":
			params.Add(params, new(big.Int).Mul(big.NewInt(2), new(big.Int).SetUint64(tn.Bytes)))
		default:
			params.Add(params, new(big.Int).SetUint64(tn.Elements))
		}
	}
	inRange := params.Cmp(big.NewInt(checked.MaxParameters)) <= 0 && stored.Cmp(big.NewInt(math.MaxInt64)) <= 0
	if err != nil {
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("Count: error wraps no sentinel: %v", err)
		}
		if inRange {
			t.Fatalf("Count refused %s parameters, %s bytes, both in range: %v", params, stored, err)
		}
		return
	}
	if !inRange {
		t.Fatalf("Count accepted %s parameters, %s bytes (got %d, %d)", params, stored, c.Parameters, c.StoredBytes)
	}
	if params.Cmp(new(big.Int).SetUint64(c.Parameters)) != 0 || stored.Cmp(new(big.Int).SetUint64(c.StoredBytes)) != 0 {
		t.Fatalf("Count = %d parameters, %d bytes; exact %s, %s", c.Parameters, c.StoredBytes, params, stored)
	}
	if int64(c.Parameters) < 0 || int64(c.StoredBytes) < 0 {
		t.Fatalf("Count leaves int64: %d parameters, %d bytes", c.Parameters, c.StoredBytes)
	}
}

// sparseFile is data followed by zeros up to size.
type sparseFile struct {
	data []byte
	size int64
}

func (s sparseFile) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	if off >= s.size {
		return 0, io.EOF
	}
	n := 0
	if off < int64(len(s.data)) {
		n = copy(p, s.data[off:])
	}
	zeros := min(int64(len(p)-n), s.size-off-int64(n))
	clear(p[n : int64(n)+zeros])
	n += int(zeros)
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
