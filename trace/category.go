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

// categoryRules are tried in order on the lower-cased kernel name; the first
// rule with a matching substring wins. The order resolves names that match
// several: NCCL kernels contain "reduce" and must be communication, flash
// attention kernels contain "gemm"-like cutlass names and must be attention,
// and fused optimizer kernels use multi_tensor_apply before any elementwise
// word. Convolutions count as GEMM because cuDNN runs them as implicit GEMMs
// on the same tensor-core units.
var categoryRules = []struct {
	cat   Category
	words []string
}{
	{CatCommunication, []string{"nccl", "allreduce", "all_reduce", "allgather", "all_gather", "reducescatter",
		"reduce_scatter", "alltoall", "all_to_all", "sendrecv", "broadcast_kernel", "c10d", "rccl"}},
	{CatAttention, []string{"flash", "fmha", "attention", "attn", "sdpa", "mha_fwd", "mha_bwd"}},
	{CatOptimizer, []string{"adam", "sgd", "lamb", "adagrad", "rmsprop", "momentum", "multi_tensor_apply",
		"optimizer", "fused_optim"}},
	{CatGEMM, []string{"gemm", "cublas", "cutlass", "xmma", "matmul", "wgmma", "hmma", "cudnn::detail::implicit",
		"conv", "winograd", "cask_cudnn", "dgrad", "wgrad", "fprop", "bmm"}},
	{CatReduction, []string{"reduce", "norm", "softmax", "bn_fw", "bn_bw", "welford", "cross_entropy", "nll_loss",
		"argmax", "argmin", "cumsum", "scan", "triton_red", "triton_per", "topk", "sort"}},
	{CatElementwise, []string{"elementwise", "pointwise", "triton_poi", "vectorized", "unrolled", "copy",
		"fill", "cat", "index", "gather", "scatter", "where", "clamp", "relu", "gelu", "silu", "dropout",
		"add", "mul", "div", "cast", "transpose", "permute"}},
}

// Categorize returns the category of a GPU op from its kind and name.
// Memcpy and memset ops are memcpy_memset whatever their name.
func Categorize(kind OpKind, name string) Category {
	if kind == KindMemcpy || kind == KindMemset {
		return CatMemory
	}
	n := strings.ToLower(name)
	// FBGEMM is a library name, not a GEMM: its embedding and permute
	// kernels would otherwise all match "gemm".
	n = strings.ReplaceAll(n, "fbgemm", "fbg")
	if strings.HasPrefix(n, "memcpy") || strings.HasPrefix(n, "memset") {
		return CatMemory
	}
	for _, r := range categoryRules {
		for _, w := range r.words {
			if strings.Contains(n, w) {
				return r.cat
			}
		}
	}
	return CatOther
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
