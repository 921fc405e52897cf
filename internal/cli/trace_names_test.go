package cli

import (
	"testing"
	"unicode/utf8"
)

// Real kernel names (from the HolisticTraceAnalysis sample traces) that
// share their first 48 characters once "void " and the arguments go.
var lookalikeKernels = []string{
	"void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4::Params)",
	"void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align4>(cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align4::Params)",
	"void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 2> >(int, at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 2>)",
	"void at::native::vectorized_elementwise_kernel<4, at::native::BUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 2> >(int, at::native::BUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 2>)",
	// These two differ only in their parameter lists.
	"ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
	"ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
	"ampere_sgemm_128x64_nn",
}

// TestShortKernelKeepsTheTail: the cut goes in the middle, so two cutlass
// instances that differ only at the end stay apart at 48 runes.
func TestShortKernelKeepsTheTail(t *testing.T) {
	a, b := shortKernel(lookalikeKernels[0], 48), shortKernel(lookalikeKernels[1], 48)
	if a == b {
		t.Errorf("shortKernel gives both %q", a)
	}
	for _, s := range []string{a, b} {
		if n := utf8.RuneCountInString(s); n != 48 {
			t.Errorf("%q is %d runes, want 48", s, n)
		}
	}
	if got := shortKernel("ampere_sgemm_128x64_nn", 48); got != "ampere_sgemm_128x64_nn" {
		t.Errorf("a short name was changed: %q", got)
	}
}

// TestShortNamesDistinct: different names in one table never render alike,
// however long the part they share; equal names stay equal.
func TestShortNamesDistinct(t *testing.T) {
	names := append(lookalikeKernels, lookalikeKernels[6])
	got := shortNames(names, 48)
	seen := map[string]int{}
	for i, s := range got {
		if j, ok := seen[s]; ok && names[j] != names[i] {
			t.Errorf("rows %d and %d both render as %q", j, i, s)
		}
		seen[s] = i
	}
	if got[6] != got[7] {
		t.Errorf("the same name rendered two ways: %q, %q", got[6], got[7])
	}
	if got[0] != shortKernel(names[0], 48) {
		t.Errorf("a pair told apart at 48 runes was widened: %q", got[0])
	}
}
