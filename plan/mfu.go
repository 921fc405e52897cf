package plan

import (
	"fmt"
	"strings"
)

// GPUClass groups cards whose datasheet peak a training step reaches in a
// similar proportion.
type GPUClass string

// GPU classes.
const (
	// Workstation: GeForce and RTX workstation cards (GDDR memory). Their
	// 16-bit peak with FP32 accumulate is a figure the Tensor Cores reach
	// at the card's boost clock.
	Workstation GPUClass = "workstation"
	// Datacenter: A100, H100, H200, B200, L4/L40, MI300X and the like,
	// whose dense peak is quoted at clocks the card does not hold under a
	// sustained matmul load within its power limit.
	Datacenter GPUClass = "datacenter"
)

// ClassOf is the class of a card by its table name.
func ClassOf(cardName string) GPUClass {
	n := strings.ToUpper(cardName)
	for _, k := range []string{"GEFORCE", "RTX", "RADEON", "TITAN"} {
		if strings.Contains(n, k) {
			return Workstation
		}
	}
	return Datacenter
}

// ClassMFU is the model-FLOPs utilisation per GPU class: the median, over
// the throughput cohort's rows on the class's cards (evidence/throughput.jsonl),
// of the utilisation at which the time model reproduces the row's measured
// tokens/s. TestClassMFUIsTheCohortMedian in package evidence recomputes
// both from the cohort and fails when they drift; validate --throughput
// reports the error with each source left out of the fit. The utilisation
// counts the training FLOPs and the recomputation (TokenFLOPs), not
// QLoRA's dequantization, which is timed apart.
//
// The datacenter figure comes from 11 rows (torchtitan and torchtune on
// A100 and H100, fsdp_qlora on A100 and H100), the workstation one from 29
// (fsdp_qlora on RTX 3090, 4090, A5000 and 6000 Ada; torchtune on 4090
// and A6000). Stacks outside the cohort (the Hugging Face Trainer, TRL,
// axolotl) are not measured: their utilisation is assumed to be the same.
var ClassMFU = map[GPUClass]float64{
	Workstation: 0.59,
	Datacenter:  0.35,
}

// DefaultMFU is the utilisation a Hardware without one uses: the
// datacenter class's.
var DefaultMFU = ClassMFU[Datacenter]

// MFUSource is the provenance line of a class's utilisation for outputs.
func MFUSource(c GPUClass) string {
	return fmt.Sprintf("%s-class GPUs: %.2f, the median over the measured throughput cohort's rows on such cards (validate --throughput shows the error, with each source left out of the fit)", c, ClassMFU[c])
}
