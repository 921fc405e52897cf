package safetensors

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzParseHeader checks that no input panics, that every error wraps a
// sentinel, and that an accepted header is self-consistent.
func FuzzParseHeader(f *testing.F) {
	f.Add(file(`{"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}`, 8))
	f.Add(file(`{"a":{"dtype":"F4","shape":[4],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}`, 4))
	f.Add(file(`{}`, 0))
	f.Add(file(`[]`, 0))
	f.Add(lengthOnly(1 << 60))
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
		for _, tn := range h.Tensors {
			if tn.End < tn.Begin || tn.End-tn.Begin != tn.Bytes || tn.End > h.DataLength || !tn.DType.Known() {
				t.Fatalf("inconsistent tensor %+v (data length %d)", tn, h.DataLength)
			}
		}
		// ReadHeader over the same bytes must agree with ParseHeader.
		if _, err := ReadHeader(bytes.NewReader(data), -1); err != nil {
			t.Fatalf("ParseHeader accepted, ReadHeader refused: %v", err)
		}
		_, _ = Count(h)
	})
}
