package gpu

import (
	"strconv"
	"strings"
)

// FlashAttention2 reports whether the flash-attn 2 kernels run on the card:
// on NVIDIA, compute capability 8.0 or newer (flash-attn's README: Ampere,
// Ada or Hopper; Turing and Volta are refused). AMD cards, and NVIDIA
// rows without a capability, are given the benefit of the doubt (ROCm
// builds exist for CDNA and RDNA3).
func (c Card) FlashAttention2() bool {
	if c.Vendor != "nvidia" {
		return true
	}
	major, _, _ := strings.Cut(c.ComputeCapability, ".")
	n, err := strconv.Atoi(major)
	return err != nil || n >= 8
}
