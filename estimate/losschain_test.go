package estimate

import (
	"math"
	"testing"
)

// Every chain allocates each tensor it names once, frees it once after
// that, and names only tensors with a size: a chain that leaks a tensor or
// frees one twice would make the replay's cache follow a step that cannot
// happen.
func TestLossChainsBalance(t *testing.T) {
	chains := map[string]lossChain{"generic": genericChain, "own16": ownLossChain16}
	for k, c := range remoteCodeChains {
		chains[k] = c
	}
	for name, c := range chains {
		var allocated, freed [lossChainTensors]int
		ended := false
		for i, op := range c.Ops {
			switch {
			case op == 0:
				ended = true
				continue
			case ended:
				t.Errorf("%s: op %d (%d) after the end of the list", name, i, op)
			case op > 0:
				if c.Bytes[op-1] <= 0 {
					t.Errorf("%s: op %d allocates tensor %d, which has no size", name, i, op-1)
				}
				allocated[op-1]++
			default:
				if allocated[-op-1] == 0 {
					t.Errorf("%s: op %d frees tensor %d before it is allocated", name, i, -op-1)
				}
				freed[-op-1]++
			}
		}
		for i, b := range c.Bytes {
			if b > 0 && (allocated[i] != 1 || freed[i] != 1) {
				t.Errorf("%s: tensor %d (%d B a logit) allocated %d and freed %d times, want once each", name, i, b, allocated[i], freed[i])
			}
		}
	}
}

// The peaks follow from the code each chain is read from (losschain.go):
// Qwen's and Baichuan2's forward holds the bf16 logits, the bf16 shifted
// copy, autocast's fp32 cast and the log-softmax (2+2+4+4); ChatGLM's holds
// the fp32 logits, the fp32 shifted copy, the log-softmax and the bf16
// output copy (4+4+4+2); the generic chain is the stock 2×4 of the replay.
func TestLossChainPeaks(t *testing.T) {
	for name, want := range map[string]int64{"qwen": 12, "chatglm": 14, "baichuan": 12} {
		if got := remoteCodeChains[name].peak(); got != want {
			t.Errorf("%s chain peak %d B a logit, want %d", name, got, want)
		}
	}
	if got := genericChain.peak(); got != 8 {
		t.Errorf("generic chain peak %d, want 8", got)
	}
	// A loop's own cross-entropy on 16-bit logits: at log_softmax's
	// backward the saved 16-bit output and the two 16-bit gradients.
	if got := ownLossChain16.peak(); got != 6 {
		t.Errorf("own 16-bit chain peak %d, want 2+2+2 = 6", got)
	}
}

// The remote-code chain replaces the stock figure: a ChatGLM3 step's loss
// chain is 14 B a logit (the stock logits_bytes is 12), while a
// transformers-coded model keeps the stock chain.
func TestRemoteCodeLogitsChain(t *testing.T) {
	glm := catalogModel(t, "THUDM/chatglm3-6b")
	r := Request{Model: glm, Method: LoRA, Precision: BF16Mixed, SeqLen: 4096, Batch: 1, GradCkpt: "full", Stack: StackHFTrainer, Attn: SDPA}
	e := est(t, r)
	got, _ := e.Component(CLogits)
	want := 14 * 4096 * float64(glm.Vocab)
	if math.Abs(float64(got)-want) > 1 {
		t.Errorf("chatglm3-6b logits chain %d bytes, want 14 × 4096 × %d = %.0f", got, glm.Vocab, want)
	}
	if c, ok := lossChainOf(r); !ok || c != remoteCodeChains["chatglm"] {
		t.Errorf("chatglm request: chain %v (known %v), want the chatglm chain", c, ok)
	}
	r.Model = catalogModel(t, "meta-llama/Llama-2-7b-hf")
	if c, ok := lossChainOf(r); ok || c != genericChain {
		t.Errorf("llama request: chain %v (known %v), want the generic chain", c, ok)
	}
	r.Model, r.Stack = catalogModel(t, "Qwen/Qwen-7B-Chat"), StackLitGPT
	if _, ok := lossChainOf(r); ok {
		t.Error("LitGPT runs its own GPT, not the checkpoint's remote code: want the generic chain")
	}
}

// With one fixed length the replay reaches its steady state after the
// first step, and what it keeps cached is what the chain's order makes the
// allocator hold beyond its peak. Qwen's chain at its backward needs a
// second 4 B block while only the 2 B blocks of the forward are free (best
// fit cannot merge separate segments), so the allocator holds 2+2+4+4+4 =
// 16 B a logit for a 12 B peak: a third beyond it.
func TestReplayRunsTheChain(t *testing.T) {
	const logits = 2048 * 151936
	s := allocStep{Layers: 1, Kept: 1 << 20, Logits: logits, Chain: remoteCodeChains["qwen"], Longest: 2048, Batch: 1,
		Lengths: uniformLengths(2048, 2048)}
	if f := cachedFraction(s); math.Abs(f-1.0/3) > 0.01 {
		t.Errorf("qwen chain at one length keeps %.4f of its peak cached, want 16/12 − 1 = 0.333", f)
	}
	s.Chain = genericChain
	if f := cachedFraction(s); f > 0.01 {
		t.Errorf("generic chain at one length keeps %.4f cached: its two blocks are reused every step, want about 0", f)
	}
}

// The pytorch stack's own loss halves the stock chain only where the
// logits reach it in 16 bits with no autocast: bf16-true LoRA and full
// fine-tunes, and a QLoRA base whose output layer stays 16-bit. Autocast
// (cross_entropy in fp32), an fp32 model and PEFT's fp32 upcast of a QLoRA
// base's output layer keep transformers' 12 B; so does the hf-trainer
// stack, whose loss is transformers' own. The inline loop keeps the logits
// referenced through the backward, in the dtype the model returns them
// (16-bit under autocast, fp32 from an fp32 output layer); --frees-logits
// drops them first.
func TestOwnLossChain(t *testing.T) {
	qwen := catalogModel(t, "Qwen/Qwen2.5-0.5B") // 151,936 logits a token: the loss phase is the peak
	no := false
	cases := []struct {
		name        string
		r           Request
		chain, held int64 // B per logit
	}{
		{"lora bf16-true", Request{Method: LoRA, Precision: BF16True, Stack: StackPyTorch}, 6, 2},
		{"lora bf16-true, logits freed", Request{Method: LoRA, Precision: BF16True, Stack: StackPyTorch, FreesLogits: true}, 6, 0},
		{"full bf16-true", Request{Method: Full, Precision: BF16True, Stack: StackPyTorch}, 6, 2},
		{"lora bf16-mixed (autocast)", Request{Method: LoRA, Precision: BF16Mixed, Stack: StackPyTorch}, 12, 2},
		{"full fp32", Request{Method: Full, Precision: FP32, Stack: StackPyTorch}, 12, 4},
		{"qlora, fp32 output layer", Request{Method: QLoRA, Precision: BF16True, Stack: StackPyTorch}, 12, 4},
		{"qlora, 16-bit output layer, logits freed", Request{Method: QLoRA, Precision: BF16True, Stack: StackPyTorch, UpcastFrozen: &no, FreesLogits: true}, 6, 0},
		{"hf-trainer bf16-true", Request{Method: LoRA, Precision: BF16True, Stack: StackHFTrainer}, 12, 0},
		{"hf-trainer ignores --frees-logits", Request{Method: LoRA, Precision: BF16True, Stack: StackHFTrainer, FreesLogits: true}, 12, 0},
	}
	for _, tc := range cases {
		r := tc.r
		r.Model, r.SeqLen, r.Batch, r.GradCkpt, r.Attn = qwen, 2048, 4, CkptFull, SDPA
		e := est(t, r)
		got, _ := e.Component(CLogits)
		logits := int64(2048 * 4 * qwen.Vocab)
		if want := (tc.chain + tc.held) * logits; math.Abs(float64(got-want)) > 1 {
			t.Errorf("%s: logits chain %d bytes, want (%d + %d held) B × %d logits = %d", tc.name, got, tc.chain, tc.held, logits, want)
		}
		n, err := r.Normalize()
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := lossChainOf(n); (c == ownLossChain16) != (tc.chain == 6) {
			t.Errorf("%s: the replay runs chain %v, want the own 16-bit chain %v", tc.name, c, tc.chain == 6)
		}
	}
}
