package trace

import (
	"fmt"
	"strings"
)

// Category is a coarse class of GPU work, decided from the kernel name.
type Category uint8

// The categories, in report order. The rules that assign them are in
// categoryRules; doc.go lists them for users.
const (
	CatGEMM Category = iota
	CatAttention
	CatElementwise
	CatReduction
	CatOptimizer
	CatCommunication
	CatMemory
	CatOther
	numCategories
)

var categoryNames = [numCategories]string{
	CatGEMM:          "gemm",
	CatAttention:     "attention",
	CatElementwise:   "elementwise",
	CatReduction:     "reduction_norm",
	CatOptimizer:     "optimizer",
	CatCommunication: "communication",
	CatMemory:        "memcpy_memset",
	CatOther:         "other",
}

// String is the category's stable name, used in --json and --what-if.
func (c Category) String() string {
	if c < numCategories {
		return categoryNames[c]
	}
	return fmt.Sprintf("category(%d)", c)
}

// ParseCategory accepts a category name as String writes it, case-insensitive,
// plus the short spellings "reduction", "norm", "memcpy", "memset", "comm".
func ParseCategory(s string) (Category, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	switch s {
	case "reduction", "norm", "reduction/norm":
		return CatReduction, nil
	case "memcpy", "memset", "memcpy/memset", "memory":
		return CatMemory, nil
	case "comm", "nccl":
		return CatCommunication, nil
	}
	for c, n := range categoryNames {
		if n == s {
			return Category(c), nil
		}
	}
	return 0, fmt.Errorf("unknown kernel category %q (known: %s)", s, strings.Join(categoryNames[:], ", "))
}

// Categories lists every category in report order.
func Categories() []Category {
	cs := make([]Category, numCategories)
	for i := range cs {
		cs[i] = Category(i)
	}
	return cs
}

// categoryRules are tried in order on the kernel's own identifier (see
// kernelIdent): its namespaces and name, lower-cased, without template
// arguments, parameters or return type. The first rule with a matching
// substring wins. Matching the identifier rather than the whole signature
// is what keeps ATen's templated kernels apart: the functor inside
// at::native::vectorized_elementwise_kernel<4, …{lambda()#1}…> says nothing
// about what kind of kernel it is (and "lambda" contains "lamb"), while
// "elementwise_kernel" does. The order resolves identifiers that match
// several: NCCL kernels contain "reduce" and must be communication, flash
// attention kernels run inside cutlass templates and must be attention,
// TBE embedding backward kernels fuse the optimizer update ("adagrad") into
// a scatter. Convolutions count as GEMM because cuDNN and MIOpen run them as
// implicit GEMMs (or Winograd/FFT transforms around GEMMs) on the same units,
// and their helper kernels (offset tables, split-K reductions, im2col
// unfolding, the FFT path's 1-D transforms and filter flip) are part of the
// convolution's time.
var categoryRules = []struct {
	cat   Category
	words []string
}{
	{CatCommunication, []string{"nccl", "rccl", "allreduce", "all_reduce", "allgather", "all_gather", "reducescatter",
		"reduce_scatter", "alltoall", "all_to_all", "sendrecv", "broadcast_kernel", "c10d"}},
	{CatAttention, []string{"flash", "fmha", "attention", "attn", "sdpa", "mha_fwd", "mha_bwd"}},
	{CatOptimizer, []string{"multi_tensor_apply", "adam", "adagrad", "rmsprop", "optimizer", "fused_optim"}},
	{CatGEMM, []string{"gemm", "gemv", "cublas", "cutlass", "xmma", "matmul", "wgmma", "hmma", "bmm", "cijk_",
		"splitkreduce", "epilogue::impl::", "scudnn", "implicit", "conv", "winograd", "fft2d", "fft1d", "cask_cudnn",
		"dgrad", "wgrad", "fprop", "igemm", "im2col", "col2im", "flip_filter"}},
	{CatReduction, []string{"reduce", "norm", "softmax", "bn_fw", "bn_bw", "welford", "moments", "gammabeta",
		"cross_entropy", "nll", "argmax", "argmin", "cumsum", "scan", "topk", "sort", "max_pool", "avg_pool", "average_pool", "pooling", "cub::device",
		"triton_red", "triton_per"}},
	{CatElementwise, []string{"elementwise", "pointwise", "triton_poi", "vectorized", "unrolled", "copy", "fill",
		"cat", "index", "indices", "gather", "scatter", "where", "clamp", "relu", "gelu", "silu", "dropout",
		"add", "mul", "div", "cast", "transpose", "permute", "nchwtonhwc", "nhwctonchw", "scal", "embedding",
		"bucketize", "range", "to_dense", "quantize", "fp8"}},
}

// wrapperKernels are generic kernel templates whose first template argument
// names the real work: cutlass::Kernel<cutlass_80_tensorop_s1688gemm_…>,
// cutlass::device_kernel<flash::FlashAttnFwdSm90<…>>.
var wrapperKernels = []string{"kernel", "kernel2", "device_kernel"}

// Categorize returns the category of a GPU op from its kind and name.
// Memcpy and memset ops are memcpy_memset whatever their name.
func Categorize(kind OpKind, name string) Category {
	if kind == KindMemcpy || kind == KindMemset {
		return CatMemory
	}
	if strings.HasPrefix(name, "Memcpy") || strings.HasPrefix(name, "Memset") {
		return CatMemory
	}
	id := strings.ToLower(kernelIdent(name))
	// FBGEMM is a library name, not a GEMM: its embedding and permute
	// kernels would otherwise all match "gemm".
	id = strings.ReplaceAll(id, "fbgemm", "fbg")
	for _, r := range categoryRules {
		for _, w := range r.words {
			if strings.Contains(id, w) {
				return r.cat
			}
		}
		// Short optimizer names only as words: "lamb" is in "lambda".
		if r.cat == CatOptimizer && (hasWord(id, "sgd") || hasWord(id, "lamb")) {
			return r.cat
		}
	}
	return CatOther
}

// hasWord reports whether w occurs in s with no letter on either side.
func hasWord(s, w string) bool {
	letter := func(c byte) bool { return c >= 'a' && c <= 'z' }
	for i := 0; ; {
		j := strings.Index(s[i:], w)
		if j < 0 {
			return false
		}
		j += i
		if (j == 0 || !letter(s[j-1])) && (j+len(w) == len(s) || !letter(s[j+len(w)])) {
			return true
		}
		i = j + 1
	}
}

// kernelIdent reduces a kernel's name to what identifies it: the qualified
// name of the function with "void " and any other return type, template
// arguments and parameter list removed, so that
//
//	void at::native::(anonymous namespace)::multi_tensor_apply_kernel<…>(…)
//	std::enable_if<!(false), void>::type internal::gemvx::kernel<…>(…)
//
// become "at::native::(anonymous namespace)::multi_tensor_apply_kernel" and
// "internal::gemvx::kernel". A generic wrapper (cutlass::Kernel<X>) keeps
// the name of its first template argument: "cutlass::Kernel X". Plain C
// names (ampere_sgemm_128x64_nn, Cijk_…, triton_poi_fused_add_0) and
// mangled ones come back unchanged.
func kernelIdent(name string) string {
	const anon = "(anonymous namespace)"
	s := strings.TrimPrefix(name, "void ")
	// Find the end of the qualified name: the parameter list's "(" outside
	// template arguments; "(anonymous namespace)" is part of the name.
	depth, end, lastSpace := 0, len(s), -1
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '<':
			depth++
		case '>':
			if depth > 0 {
				depth--
			}
		case ' ':
			if depth == 0 {
				lastSpace = i
			}
		case '(':
			if depth == 0 {
				if strings.HasPrefix(s[i:], anon) {
					i += len(anon) - 1
					continue
				}
				end = i
				i = len(s)
			}
		}
	}
	q := s[:end]
	if lastSpace >= 0 && lastSpace < end {
		q = q[lastSpace+1:] // a return type before the name
	}
	// Drop template arguments, remembering the first one's head.
	var b strings.Builder
	var first strings.Builder
	depth = 0
	arg := 0
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case c == '<':
			depth++
		case c == '>':
			if depth > 0 {
				depth--
			}
		case depth == 0:
			b.WriteByte(c)
		case depth == 1 && c == ',':
			arg++
		case depth == 1 && arg == 0:
			first.WriteByte(c)
		}
	}
	id := b.String()
	last := id
	if i := strings.LastIndex(id, "::"); i >= 0 {
		last = id[i+2:]
	}
	for _, w := range wrapperKernels {
		if strings.EqualFold(last, w) && first.Len() > 0 {
			return id + " " + strings.TrimSpace(first.String())
		}
	}
	return id
}

// priority orders ops competing for the same overlapped nanoseconds: lower
// wins. Compute keeps the time and communication or copies running under it
// get none, so the communication row is the exposed communication, the part
// that overlap did not hide.
func (c Category) priority() uint8 {
	switch c {
	case CatCommunication:
		return 2
	case CatMemory:
		return 1
	}
	return 0
}
