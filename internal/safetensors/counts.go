package safetensors

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/canifinetune/canifinetune/internal/checked"
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
//
// Every sum is checked: a parameter count over checked.MaxParameters (10^15),
// a stored-byte total past int64, or any sum that would wrap is an
// ErrMalformed naming the tensor that crossed the bound, never a wrapped or
// negative number that an estimate would take for a small model.
func Count(headers ...Header) (Counts, error) {
	names := make(map[string]bool)
	for _, h := range headers {
		for _, t := range h.Tensors {
			names[t.Name] = true
		}
	}
	c := Counts{ByDType: make(map[DType]DTypeCount)}
	for _, h := range headers {
		for _, t := range h.Tensors {
			if err := c.add(t, names); err != nil {
				return Counts{}, err
			}
		}
	}
	slices.Sort(c.Packed4Bit.Formats)
	return c, nil
}

// add counts one tensor into c.
func (c *Counts) add(t Tensor, names map[string]bool) error {
	s := sums{t: t}
	c.Tensors++
	s.add(&c.StoredBytes, t.Bytes, "stored bytes")
	if isCompanion(t.Name, names) {
		c.QuantState.Tensors++
		s.add(&c.QuantState.Elements, t.Elements, "quantization constant elements")
		s.add(&c.QuantState.Bytes, t.Bytes, "quantization constant bytes")
		return s.check(c)
	}
	if format := packedFormat(t, names); format != "" {
		c.Packed4Bit.Tensors++
		s.add(&c.Packed4Bit.StoredBytes, t.Bytes, "packed 4-bit bytes")
		params, ok := checked.Mul(2, t.Bytes)
		if !ok {
			s.err = s.overflow("parameter count")
		}
		s.add(&c.Packed4Bit.Parameters, params, "packed 4-bit parameters")
		s.add(&c.Parameters, params, "parameter count")
		if !slices.Contains(c.Packed4Bit.Formats, format) {
			c.Packed4Bit.Formats = append(c.Packed4Bit.Formats, format)
		}
		return s.check(c)
	}
	d := c.ByDType[t.DType]
	d.Tensors++
	s.add(&d.Elements, t.Elements, string(t.DType)+" elements")
	s.add(&d.Bytes, t.Bytes, string(t.DType)+" bytes")
	c.ByDType[t.DType] = d
	s.add(&c.Parameters, t.Elements, "parameter count")
	return s.check(c)
}

// sums adds one tensor's sizes to running totals and keeps the first
// overflow, so add reads as the plain sums it makes.
type sums struct {
	t   Tensor
	err error
}

func (s *sums) add(total *uint64, n uint64, what string) {
	if s.err != nil {
		return
	}
	v, ok := checked.Add(*total, n)
	if !ok {
		s.err = s.overflow(what)
		return
	}
	*total = v
}

func (s *sums) overflow(what string) error {
	return fmt.Errorf("%w: tensor %q (shape %v of %s): the %s overflows 64 bits", ErrMalformed, s.t.Name, s.t.Shape, s.t.DType, what)
}

// check refuses totals past the bounds every count shares.
func (s *sums) check(c *Counts) error {
	switch {
	case s.err != nil:
		return s.err
	case !checked.Parameters(c.Parameters):
		return fmt.Errorf("%w: tensor %q (shape %v of %s) brings the parameter count to %d, more than 10^15: the header is corrupt",
			ErrMalformed, s.t.Name, s.t.Shape, s.t.DType, c.Parameters)
	case c.StoredBytes > math.MaxInt64:
		return fmt.Errorf("%w: tensor %q (shape %v of %s) brings the stored bytes to %d, more than a file system can hold (2^63-1)",
			ErrMalformed, s.t.Name, s.t.Shape, s.t.DType, c.StoredBytes)
	}
	return nil
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
