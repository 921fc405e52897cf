package trace

import "testing"

func TestCategorize(t *testing.T) {
	tests := []struct {
		kind OpKind
		name string
		want Category
	}{
		{KindKernel, "ampere_sgemm_128x64_tn", CatGEMM},
		{KindKernel, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", CatGEMM},
		{KindKernel, "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(Params)", CatGEMM},
		{KindKernel, "implicit_convolve_sgemm", CatGEMM},
		{KindKernel, "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>(Flash_fwd_params)", CatAttention},
		{KindKernel, "fmha_cutlassF_f16_aligned_64x64_rf_sm80", CatAttention}, // cutlass, yet attention
		{KindKernel, "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", CatCommunication},
		{KindKernel, "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", CatCommunication}, // "reduce" but NCCL
		{KindKernel, "void at::native::multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>>", CatOptimizer},
		{KindKernel, "void at::native::reduce_kernel<512, 1, ReduceOp<float, MeanOps<float>>>", CatReduction},
		{KindKernel, "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float>", CatReduction},
		{KindKernel, "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>", CatReduction},
		{KindKernel, "triton_red_fused_native_layer_norm_0", CatReduction},
		{KindKernel, "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>", CatElementwise},
		{KindKernel, "triton_poi_fused_add_0", CatElementwise},
		{KindKernel, "fbgemm_gpu::permute_2D_data_kernel<false, int, long>", CatElementwise}, // fbgemm is not GEMM
		{KindKernel, "cudnn::ops::nchwToNhwcKernel", CatElementwise},                         // a layout transpose
		// The functor's lambda must not read as the LAMB optimizer.
		{KindKernel, "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>)", CatElementwise},
		{KindKernel, "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4>)", CatReduction},
		{KindKernel, "std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float, float, float, false, true, false, false, 7, cublasGemvParams<cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float> >(cublasGemvParams<cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>)", CatGEMM}, // a return type before the name
		{KindKernel, "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<cutlass::gemm::collective::CollectiveMainloop>>>(Params)", CatAttention}, // the wrapper's argument names the work
		{KindKernel, "lamb_update_kernel", CatOptimizer},
		{KindKernel, "void permute_pooled_embs_kernel<float>(float const*, long const*, long const*, long const*, float*, long, long, long)", CatElementwise}, // "pooled" is not pooling
		{KindKernel, "Memcpy DtoD (Device -> Device)", CatMemory},
		{KindMemset, "anything", CatMemory},
		{KindMemcpy, "ncclKernel", CatMemory}, // the event category wins over the name
	}
	for _, tt := range tests {
		if got := Categorize(tt.kind, tt.name); got != tt.want {
			t.Errorf("Categorize(%d, %q) = %s, want %s", tt.kind, tt.name, got, tt.want)
		}
	}
}

func TestParseCategory(t *testing.T) {
	for _, c := range Categories() {
		got, err := ParseCategory(c.String())
		if err != nil || got != c {
			t.Errorf("ParseCategory(%q) = %v, %v", c.String(), got, err)
		}
	}
	if c, err := ParseCategory("Norm"); err != nil || c != CatReduction {
		t.Errorf("ParseCategory(Norm) = %v, %v", c, err)
	}
	if _, err := ParseCategory("tensorcore"); err == nil {
		t.Error("ParseCategory(tensorcore) succeeded")
	}
}
