package safetensors

// DType is a safetensors element type as spelled in the header ("BF16").
type DType string

// The dtypes of the safetensors format, plus the FNUZ float8 variants some
// ROCm-oriented checkpoints carry.
const (
	F64        DType = "F64"
	F32        DType = "F32"
	F16        DType = "F16"
	BF16       DType = "BF16"
	I64        DType = "I64"
	I32        DType = "I32"
	I16        DType = "I16"
	I8         DType = "I8"
	U64        DType = "U64"
	U32        DType = "U32"
	U16        DType = "U16"
	U8         DType = "U8"
	Bool       DType = "BOOL"
	C64        DType = "C64"
	F8E4M3     DType = "F8_E4M3"
	F8E5M2     DType = "F8_E5M2"
	F8E4M3FNUZ DType = "F8_E4M3FNUZ"
	F8E5M2FNUZ DType = "F8_E5M2FNUZ"
	F8E8M0     DType = "F8_E8M0"
	F6E2M3     DType = "F6_E2M3"
	F6E3M2     DType = "F6_E3M2"
	F4         DType = "F4"
)

// dtypeBits is the stored width of one element. F6 and F4 are the packed
// microscaling (MX) element types: several elements share a byte, and a
// tensor must end on a byte boundary.
var dtypeBits = map[DType]int{
	F64: 64, I64: 64, U64: 64, C64: 64,
	F32: 32, I32: 32, U32: 32,
	F16: 16, BF16: 16, I16: 16, U16: 16,
	F8E4M3: 8, F8E5M2: 8, F8E4M3FNUZ: 8, F8E5M2FNUZ: 8, F8E8M0: 8,
	I8: 8, U8: 8, Bool: 8,
	F6E2M3: 6, F6E3M2: 6,
	F4: 4,
}

// Known reports whether d is a dtype this package can size.
func (d DType) Known() bool { _, ok := dtypeBits[d]; return ok }

// Bits is the stored width of one element in bits, 0 for an unknown dtype.
func (d DType) Bits() int { return dtypeBits[d] }
