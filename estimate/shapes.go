package estimate

import (
	"github.com/canifinetune/canifinetune/hfconfig"
)

// adapterParams is Σ rank × (in + out) over the targeted Linear modules of
// every layer, expert projections counted once per expert (seed 000 §2).
func adapterParams(r Request) int64 {
	if r.Method == Full {
		return 0
	}
	sum, err := r.Model.AdapterSum(r.LoRATargets)
	if err != nil {
		return 0 // Normalize has already rejected unresolvable targets
	}
	n := r.LoRARank * sum
	if r.ExtraLoRAOnHead {
		n += r.LoRARank * (r.Model.Hidden + r.Model.Vocab)
	}
	return n
}

// extraTrainableParams counts modules trained in full beside the adapters
// (PEFT modules_to_save: lm_head, embed_tokens).
func extraTrainableParams(r Request) int64 {
	m := r.Model
	var n int64
	for _, name := range r.ExtraTrainable {
		switch {
		case isOutputLayer(name):
			if m.LMHeadParams > 0 {
				n += m.LMHeadParams
			} else {
				n += m.EmbeddingParams // tied: training the head trains the embedding
			}
		case isInputEmbedding(name):
			n += m.EmbeddingParams
		}
	}
	return n
}

// ckptOn reports whether activation checkpointing of any kind is on.
func ckptOn(r Request) bool { return r.GradCkpt.Spec().Recomputes }

// fusedCE reports whether a fused or chunked loss replaces the logits chain.
func fusedCE(r Request) bool { return r.FusedCE != "" && r.FusedCE != LossNone }

// quantBytesPerParam is the packed storage of a quantized Linear weight:
// 4-bit schemes pack two weights a byte, int8 one.
func quantBytesPerParam(scheme Quant) float64 { return float64(scheme.Spec().BitsPerWeight) / 8 }

// quantMetaBytesPerParam is seed 000's absmax/lookup-table overhead per
// quantized parameter: int8 ~0.15 (bitsandbytes), NF4 blocksize 64: fp32
// absmax / 64 = 0.0625, NF4 + double quant ~0.017 (int8 absmax / 64 plus an
// fp32 second level, measured via quant_state).
func quantMetaBytesPerParam(scheme Quant) float64 {
	switch q := scheme.Spec(); {
	case q.GroupSize > 0:
		return gptqStateBytesPerParam(q)
	case q.BitsPerWeight == 8:
		return 0.15
	case q.DoubleQuant:
		return 0.017
	}
	return 0.0625
}

// dequantWorkspace is seed 000's transient bf16 copy of the largest weight
// tile a 4-bit matmul materialises: 2 × hidden × intermediate × 2 B.
func dequantWorkspace(m *hfconfig.Model) int64 {
	inter := m.Intermediate
	if inter == 0 {
		inter = m.ActiveFFN()
	}
	return 2 * m.Hidden * inter * 2
}

func frac(x int64, f float64) int64 { return int64(float64(x) * f) }

// largestTrainable is the largest single tensor a request trains, in
// elements: under full fine-tuning the largest parameter; with adapters a
// module trained in full beside them (an embedding or output layer), else
// the widest adapter matrix, rank × the wider side of the widest Linear (a
// bound: the widest Linear need not be targeted).
func largestTrainable(r Request) int64 {
	m := r.Model
	switch {
	case r.Method == Full:
		return m.LargestTensor()
	case len(r.ExtraTrainable) > 0:
		return m.Vocab * m.Hidden
	case r.ExtraLoRAOnHead:
		return r.LoRARank * max(m.WidestSide(), m.Vocab)
	}
	return r.LoRARank * m.WidestSide()
}
