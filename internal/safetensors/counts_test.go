package safetensors

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func mustParse(t *testing.T, hdr string, dataLen int) Header {
	t.Helper()
	h, err := ParseHeader(file(hdr, dataLen))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func mustCount(t *testing.T, hs ...Header) Counts {
	t.Helper()
	c, err := Count(hs...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCountPlain(t *testing.T) {
	a := mustParse(t, `{"embed":{"dtype":"BF16","shape":[10,4],"data_offsets":[0,80]},"norm":{"dtype":"F32","shape":[4],"data_offsets":[80,96]}}`, 96)
	b := mustParse(t, `{"head":{"dtype":"BF16","shape":[4,10],"data_offsets":[0,80]}}`, 80)
	want := Counts{
		Tensors:     3,
		Parameters:  84,
		StoredBytes: 176,
		ByDType: map[DType]DTypeCount{
			BF16: {Tensors: 2, Elements: 80, Bytes: 160},
			F32:  {Tensors: 1, Elements: 4, Bytes: 16},
		},
	}
	if diff := cmp.Diff(want, mustCount(t, a, b)); diff != "" {
		t.Errorf("Count (-want +got):\n%s", diff)
	}
}

// TestCountBnb4bit follows the layout transformers writes for a
// bitsandbytes NF4 checkpoint: the 4×8 weight becomes 16 U8 bytes plus
// companions; here the quant_state sits in another shard than its weight.
func TestCountBnb4bit(t *testing.T) {
	a := mustParse(t, `{
		"q.weight":{"dtype":"U8","shape":[16,1],"data_offsets":[0,16]},
		"q.weight.absmax":{"dtype":"F32","shape":[1],"data_offsets":[16,20]},
		"q.weight.quant_map":{"dtype":"F32","shape":[16],"data_offsets":[20,84]},
		"norm.weight":{"dtype":"F16","shape":[8],"data_offsets":[84,100]},
		"x.absmax":{"dtype":"F16","shape":[2],"data_offsets":[100,104]}}`, 104)
	b := mustParse(t, `{
		"q.weight.quant_state.bitsandbytes__nf4":{"dtype":"U8","shape":[90],"data_offsets":[0,90]},
		"k.weight":{"dtype":"U8","shape":[8,1],"data_offsets":[90,98]},
		"k.weight.quant_state.bitsandbytes__fp4":{"dtype":"U8","shape":[10],"data_offsets":[98,108]}}`, 108)
	want := Counts{
		Tensors:     8,
		Parameters:  32 + 16 + 8 + 2, // q, k unpacked; norm; x.absmax is a parameter: no x.quant_state
		StoredBytes: 104 + 108,
		ByDType: map[DType]DTypeCount{
			F16: {Tensors: 2, Elements: 10, Bytes: 20},
		},
		Packed4Bit: PackedCount{Tensors: 2, StoredBytes: 24, Parameters: 48, Formats: []string{"fp4", "nf4"}},
		QuantState: DTypeCount{Tensors: 4, Elements: 1 + 16 + 90 + 10, Bytes: 4 + 64 + 90 + 10},
	}
	if diff := cmp.Diff(want, mustCount(t, a, b)); diff != "" {
		t.Errorf("Count (-want +got):\n%s", diff)
	}
}

func TestCountBnb8bit(t *testing.T) {
	h := mustParse(t, `{
		"o.weight":{"dtype":"I8","shape":[4,4],"data_offsets":[0,16]},
		"o.SCB":{"dtype":"F32","shape":[4],"data_offsets":[16,32]},
		"o.weight_format":{"dtype":"U8","shape":[],"data_offsets":[32,33]},
		"p.SCB":{"dtype":"F32","shape":[1],"data_offsets":[33,37]}}`, 37)
	got := mustCount(t, h)
	if got.Parameters != 16+1 || got.QuantState.Tensors != 2 {
		t.Errorf("Parameters, QuantState.Tensors = %d, %d; want 17, 2 (p.SCB has no p.weight, so it counts)", got.Parameters, got.QuantState.Tensors)
	}
}

// TestCountRefuses: a count past the bound every parameter count shares, or
// one that would wrap, is an error naming the tensor that crossed it, never a
// number: 2^62-2 F4 elements became a negative estimate and the verdict "yes".
func TestCountRefuses(t *testing.T) {
	f4 := func(name string, elements, begin uint64) string {
		return fmt.Sprintf(`%q:{"dtype":"F4","shape":[%d],"data_offsets":[%d,%d]}`, name, elements, begin, begin+elements/2)
	}
	u8 := func(name string, n, begin uint64) string {
		return fmt.Sprintf(`%q:{"dtype":"U8","shape":[%d],"data_offsets":[%d,%d]}`, name, n, begin, begin+n)
	}
	hdr := func(entries ...string) Header {
		h, err := ParseHeaderJSON([]byte("{" + strings.Join(entries, ",") + "}"))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	// One tensor holds under 2^61 bytes (its size in bits must fit in 64
	// bits), so five shards of one such companion each pass 2^63.
	var bigCompanions []Header
	for i := range 5 {
		w := fmt.Sprintf("l%d.weight", i)
		bigCompanions = append(bigCompanions, hdr(u8(w, 2, 0), u8(w+".quant_state.bitsandbytes__nf4", 1, 2), u8(w+".absmax", 1<<61-8, 3)))
	}
	tests := []struct {
		name    string
		headers []Header
		says    []string
	}{
		{"one F4 tensor of 2^62-2 elements", []Header{hdr(f4("w", 1<<62-2, 0))}, []string{`"w"`, "4611686018427387902", "10^15"}},
		{"just past the bound", []Header{hdr(u8("a", 1e15, 0), u8("b", 1, 1e15))}, []string{`"b"`, "1000000000000001"}},
		{"across shards", []Header{hdr(u8("a", 6e14, 0)), hdr(u8("b", 6e14, 0))}, []string{`"b"`, "10^15"}},
		// Packed 4-bit weights count two parameters per stored byte.
		{"packed 4-bit", []Header{hdr(u8("q", 6e14, 0), u8("q.quant_state.bitsandbytes__nf4", 1, 6e14))}, []string{`"q"`, "1200000000000000"}},
		// Companions are stored bytes, not parameters: their sum across
		// shards is what must not wrap or leave int64.
		{"stored bytes leave int64", bigCompanions, []string{"absmax", "stored bytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Count(tt.headers...)
			if err == nil {
				t.Fatalf("Count = %d parameters, %d stored bytes; want an error", c.Parameters, c.StoredBytes)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("err = %v, want ErrMalformed", err)
			}
			for _, s := range tt.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %s", err, s)
				}
			}
		})
	}
	// At the bound exactly, the count stands.
	c, err := Count(hdr(u8("a", 1e15-1, 0), u8("b", 1, 1e15-1)))
	if err != nil || c.Parameters != 1e15 {
		t.Errorf("Count at the bound = %d, %v; want 10^15, nil", c.Parameters, err)
	}
}
