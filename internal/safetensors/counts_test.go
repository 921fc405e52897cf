package safetensors

import (
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
	if diff := cmp.Diff(want, Count(a, b)); diff != "" {
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
	if diff := cmp.Diff(want, Count(a, b)); diff != "" {
		t.Errorf("Count (-want +got):\n%s", diff)
	}
}

func TestCountBnb8bit(t *testing.T) {
	h := mustParse(t, `{
		"o.weight":{"dtype":"I8","shape":[4,4],"data_offsets":[0,16]},
		"o.SCB":{"dtype":"F32","shape":[4],"data_offsets":[16,32]},
		"o.weight_format":{"dtype":"U8","shape":[],"data_offsets":[32,33]},
		"p.SCB":{"dtype":"F32","shape":[1],"data_offsets":[33,37]}}`, 37)
	got := Count(h)
	if got.Parameters != 16+1 || got.QuantState.Tensors != 2 {
		t.Errorf("Parameters, QuantState.Tensors = %d, %d; want 17, 2 (p.SCB has no p.weight, so it counts)", got.Parameters, got.QuantState.Tensors)
	}
}
