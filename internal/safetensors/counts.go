package safetensors

import (
	"slices"
	"strings"
)

// bnb4bitStateSuffix starts the name of the tensor in which bitsandbytes
// serializes the QuantState of a 4-bit weight W: "W.quant_state.bitsandbytes__nf4"
// or "...__fp4". Its presence is what marks W (stored as U8, two 4-bit values
// per byte) as packed.
const bnb4bitStateSuffix = ".quant_state.bitsandbytes__"

// bnb4bitCompanions are the other tensors bitsandbytes stores next to a packed
// 4-bit weight W, as "W.absmax" and so on: quantization constants, not
// parameters of the model.
var bnb4bitCompanions = []string{".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map"}

// bnb8bitCompanions are the module buffers bitsandbytes LLM.int8() stores next
// to an I8 weight ("proj.SCB", "proj.weight_format"): per-row scales, not
// parameters.
var bnb8bitCompanions = []string{".SCB", ".weight_format"}

// DTypeCount sums the tensors of one dtype.
type DTypeCount struct {
	Tensors  int    `json:"tensors"`
	Elements uint64 `json:"elements"`
	Bytes    uint64 `json:"bytes"`
}

// PackedCount sums bitsandbytes 4-bit weights, which are stored as U8 with two
// 4-bit values per byte.
type PackedCount struct {
	Tensors int `json:"tensors"`
	// StoredBytes is what the packed tensors occupy on disk (and in GPU memory).
	StoredBytes uint64 `json:"stored_bytes"`
	// Parameters is the logical parameter count: two per stored byte.
	Parameters uint64 `json:"parameters"`
	// Formats lists the 4-bit formats seen ("nf4", "fp4"), sorted.
	Formats []string `json:"formats,omitempty"`
}

// Counts summarizes the tensors of one or more headers (the shards of one
// checkpoint).
type Counts struct {
	// Tensors is the number of tensors of every kind.
	Tensors int `json:"tensors"`
	// Parameters is the logical parameter count of the model: the elements of
	// every tensor except quantization companions, with packed 4-bit weights
	// counted as two parameters per byte. It equals the sum of ByDType
	// elements plus Packed4Bit.Parameters.
	Parameters uint64 `json:"parameters"`
	// StoredBytes is the size of every tensor's data, companions included;
	// it is what an index's metadata.total_size records.
	StoredBytes uint64 `json:"stored_bytes"`
	// ByDType counts the parameter tensors stored as themselves, by dtype;
	// packed 4-bit weights and quantization companions are counted apart.
	ByDType map[DType]DTypeCount `json:"by_dtype"`
	// Packed4Bit counts bitsandbytes 4-bit weights.
	Packed4Bit PackedCount `json:"packed_4bit"`
	// QuantState counts the bitsandbytes companions (absmax, quant_map,
	// quant_state, SCB…): stored, but not parameters.
	QuantState DTypeCount `json:"quant_state"`
}

// Count summarizes the tensors of the given headers together: a packed
// weight's companions may sit in another shard than the weight itself.
func Count(headers ...Header) Counts {
	names := make(map[string]bool)
	for _, h := range headers {
		for _, t := range h.Tensors {
			names[t.Name] = true
		}
	}
	c := Counts{ByDType: make(map[DType]DTypeCount)}
	for _, h := range headers {
		for _, t := range h.Tensors {
			c.Tensors++
			c.StoredBytes += t.Bytes
			if isCompanion(t.Name, names) {
				c.QuantState.Tensors++
				c.QuantState.Elements += t.Elements
				c.QuantState.Bytes += t.Bytes
				continue
			}
			if format := packedFormat(t, names); format != "" {
				c.Packed4Bit.Tensors++
				c.Packed4Bit.StoredBytes += t.Bytes
				c.Packed4Bit.Parameters += 2 * t.Bytes
				c.Parameters += 2 * t.Bytes
				if !slices.Contains(c.Packed4Bit.Formats, format) {
					c.Packed4Bit.Formats = append(c.Packed4Bit.Formats, format)
				}
				continue
			}
			d := c.ByDType[t.DType]
			d.Tensors++
			d.Elements += t.Elements
			d.Bytes += t.Bytes
			c.ByDType[t.DType] = d
			c.Parameters += t.Elements
		}
	}
	slices.Sort(c.Packed4Bit.Formats)
	return c
}

// isCompanion reports whether name is a bitsandbytes quantization companion.
// A suffix alone is not enough: the tensor it belongs to must be there too,
// so an ordinary parameter that happens to be called "x.absmax" still counts.
func isCompanion(name string, names map[string]bool) bool {
	if strings.Contains(name, bnb4bitStateSuffix) {
		return true
	}
	for _, s := range bnb4bitCompanions {
		if w, ok := strings.CutSuffix(name, s); ok && (names[w+bnb4bitStateSuffix+"nf4"] || names[w+bnb4bitStateSuffix+"fp4"]) {
			return true
		}
	}
	for _, s := range bnb8bitCompanions {
		if m, ok := strings.CutSuffix(name, s); ok && names[m+".weight"] {
			return true
		}
	}
	return false
}

// packedFormat returns "nf4" or "fp4" when t is a U8 weight with a
// bitsandbytes 4-bit quant_state companion, "" otherwise.
func packedFormat(t Tensor, names map[string]bool) string {
	if t.DType != U8 {
		return ""
	}
	for _, f := range []string{"nf4", "fp4"} {
		if names[t.Name+bnb4bitStateSuffix+f] {
			return f
		}
	}
	return ""
}
