package estimate

// gptqStateBytesPerParam is a GPTQ QuantLinear's state beside its packed
// 4-bit qweight, per weight: scales (fp16, one per group and output column:
// 2/group B) and qzeros (4-bit zero points packed in int32, one per group
// and output column: 0.5/group B), from auto_gptq's QuantLinear buffers
// (qweight int32 [in/8, out], qzeros int32 [in/group, out/8], scales fp16
// [in/group, out], g_idx int32 [in]). g_idx, 4 B per input row, is below
// 0.001 B per weight for any module wider than 4096 outputs and left out.
func gptqStateBytesPerParam(q QuantSpec) float64 {
	return (2 + 0.5) / float64(q.GroupSize)
}
