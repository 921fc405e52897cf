package estimate

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
)

// torchao's AdamW8bit: 8-bit states with a scale per 256 elements, and a
// step that holds fp32 temporaries for one parameter at a time.

func aoBase(t *testing.T) Request {
	t.Helper()
	r := kernelBase(t)
	r.Method, r.LoRARank, r.LoRATargets = Full, 0, nil
	r.GradCkpt = CkptFull
	r.Stack = StackTorchtune
	r.Optimizer = AOAdamW8bit
	return r
}

func TestAOAdamW8bitStatesAndStep(t *testing.T) {
	r := aoBase(t)
	te, _, err := PhasePeak{Coef: DefaultCoefficients}.terms(r)
	if err != nil {
		t.Fatal(err)
	}
	if want := te.Trainable*2 + te.Trainable*2*4/256; te.OptStates != want {
		t.Errorf("states %d B, want two 1-byte states and a 4-byte scale per 256 elements: %d B", te.OptStates, want)
	}
	bnb := r
	bnb.Optimizer = AdamW8bit
	tb, _, err := PhasePeak{Coef: DefaultCoefficients}.terms(bnb)
	if err != nil {
		t.Fatal(err)
	}
	if tb.OptStates != te.OptStates {
		t.Errorf("bitsandbytes' states (absmax per 256 since 0.44.0) %d B, want torchao's (scale per 256) %d B", tb.OptStates, te.OptStates)
	}
	if tb.OptTransient != 0 {
		t.Errorf("bitsandbytes' fused 8-bit step has %d B of temporaries, want none", tb.OptTransient)
	}
	m := r.Model
	if want := m.Vocab * m.Hidden * aoStepTempBytes; te.OptTransient != want {
		t.Errorf("step temporaries %d B, want the largest parameter's (the embedding) × %d B = %d B", te.OptTransient, aoStepTempBytes, want)
	}
	// The step phase holds every gradient and one parameter's temporaries.
	if got, want := est(t, r).Phases.Step-est(t, bnb).Phases.Step, te.OptTransient; got != want {
		t.Errorf("step phase grows by %d B over bitsandbytes', want the temporaries' %d B", got, want)
	}
	lora := r
	lora.Method, lora.LoRARank, lora.LoRATargets = LoRA, 8, []string{"all-linear"}
	tl, _, err := PhasePeak{Coef: DefaultCoefficients}.terms(lora)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(8) * m.ActiveFFN() * aoStepTempBytes; tl.OptTransient != want {
		t.Errorf("LoRA step temporaries %d B, want rank × the widest side (%d) × %d B = %d B", tl.OptTransient, m.ActiveFFN(), aoStepTempBytes, want)
	}
}

// With optimizer-in-backward the largest parameter's temporaries come when
// its hook runs, not beside the loss chain: for a tied output layer at the
// end of the backward.
func TestAOAdamW8bitInBackward(t *testing.T) {
	r := aoBase(t)
	r.Model = catalogModel(t, "meta-llama/Llama-3.2-3B-Instruct")
	r.SeqLen, r.Batch = 4096, 2
	// torchtune's flags table's "+ 8-bit AdamW" row: offloaded
	// checkpoints, compile, the chunked loss.
	r.FusedCE, r.GradCkpt, r.Compile = LossChunked, CkptOffload, true
	r.OptimizerInBackward = true
	if !r.Model.TiedEmbeddings {
		t.Fatal("Llama 3.2 3B is tied")
	}
	te, _, err := PhasePeak{Coef: DefaultCoefficients}.terms(r)
	if err != nil {
		t.Fatal(err)
	}
	m := r.Model
	head := m.Vocab * m.Hidden
	if te.Grads != head*2 {
		t.Errorf("in-flight gradient %d B, want the tied embedding's bf16 gradient %d B (no foreach doubling)", te.Grads, head*2)
	}
	if want := head * aoStepTempBytes; te.HookStepTemp != want {
		t.Errorf("hook-time temporaries %d B, want %d B", te.HookStepTemp, want)
	}
	with := est(t, r)
	bnb := r
	bnb.Optimizer = AdamW8bit
	without := est(t, bnb)
	if with.Phases.Forward-without.Phases.Forward != 0 {
		t.Errorf("the forward/backward phase moved by %d B: the hook's temporaries are not beside the loss chain", with.Phases.Forward-without.Phases.Forward)
	}
	if want := te.Grads + te.HookStepTemp; with.Phases.Step != want || with.Phases.ForwardPeak {
		t.Errorf("step phase %d B (forward peak %v), want the gradient and the temporaries, %d B, as the peak", with.Phases.Step, with.Phases.ForwardPeak, want)
	}
	g, _ := with.Component(CGradients)
	a, _ := with.Component(CActivations)
	if g != te.Grads+te.HookStepTemp || a != 0 {
		t.Errorf("reported gradients %d B and activations %d B, want %d and 0 at the end of the backward", g, a, te.Grads+te.HookStepTemp)
	}
	// An untied output layer is stepped before the layers' backward, beside
	// the saved activations (here one block's offloaded input).
	untied := r
	untied.Model = catalogModel(t, "meta-llama/Llama-2-7b-hf")
	tu, _, err := PhasePeak{Coef: DefaultCoefficients}.terms(untied)
	if err != nil {
		t.Fatal(err)
	}
	eu := est(t, untied)
	if eu.Phases.Step <= tu.Grads+tu.HookStepTemp {
		t.Errorf("untied: step phase %d B, want more than the gradient and temporaries' %d B (the saved activations)", eu.Phases.Step, tu.Grads+tu.HookStepTemp)
	}
}

// The coefficient is the receipt's figure: the buffers Inductor's wrapper
// allocates per parameter element, rounded down to whole bytes (the 0.03 B
// left are the step's two new per-block scales, negligible), and the
// receipt's peak is its buffers' sum (nothing is freed inside the call).
func TestAOStepTempReceipt(t *testing.T) {
	for _, tt := range []struct {
		file string
		want int64
	}{
		{"../oracle/torchao/receipts/torch-2.5.1-torchao-0.6.1.json", aoStepTempBytes},
		{"../oracle/torchao/receipts/torch-2.15.0-torchao-0.18.0.json", 8},
	} {
		b, err := os.ReadFile(tt.file)
		if err != nil {
			t.Fatal(err)
		}
		var rc struct {
			Torch, TorchAO string
			PerElement     float64 `json:"peak_bytes_per_element"`
			Peak           int64   `json:"peak_bytes"`
			Param          struct{ Numel int64 }
			Buffers        []struct{ Shape, Dtype string }
		}
		if err := json.Unmarshal(b, &rc); err != nil {
			t.Fatalf("%s: %v", tt.file, err)
		}
		if got := int64(math.Floor(rc.PerElement)); got != tt.want || rc.Param.Numel == 0 {
			t.Errorf("%s: %.4f B per element (numel %d), want %d whole bytes", tt.file, rc.PerElement, rc.Param.Numel, tt.want)
		}
		var sum int64
		for _, b := range rc.Buffers {
			n := int64(1)
			for _, d := range strings.Split(b.Shape, ",") {
				if d = strings.TrimSpace(d); d != "" {
					v, err := strconv.ParseInt(d, 10, 64)
					if err != nil {
						t.Fatalf("%s: shape %q: %v", tt.file, b.Shape, err)
					}
					n *= v
				}
			}
			if b.Dtype != "float32" {
				t.Fatalf("%s: a %s buffer; the sum below assumes fp32", tt.file, b.Dtype)
			}
			sum += 4 * n
		}
		if sum != rc.Peak {
			t.Errorf("%s: buffers sum to %d B, peak says %d B", tt.file, sum, rc.Peak)
		}
	}
}

// The step's temporaries are per GPU what each rank steps: a shard under
// sharded gradients, the whole under DDP (whose buckets double only the
// gradients), nothing on the GPU when ZeRO-Offload steps on the CPU.
func TestStepTemporariesPerGPU(t *testing.T) {
	r := aoBase(t)
	r.Stack = StackHFTrainer
	te, _, err := PhasePeak{Coef: DefaultCoefficients}.terms(r)
	if err != nil {
		t.Fatal(err)
	}
	ceil := func(b, n int64) int64 { return (b + n - 1) / n }
	for _, tt := range []struct {
		st   Strategy
		want int64
	}{
		{FSDPFullShard, ceil(te.Grads, 4) + ceil(te.OptTransient, 4)},
		{DDP, 2*te.Grads + te.OptTransient},
	} {
		x := r
		x.Sharding = Sharding{Strategy: tt.st, GPUs: 4}
		if got := est(t, x).Phases.Step; got != tt.want {
			t.Errorf("%s ×4: step phase %d B, want %d B", tt.st, got, tt.want)
		}
	}
	// foreach AdamW's step buffer under ZeRO-2 with the optimizer on the CPU.
	x := r
	x.Optimizer = AdamWTorch
	x.Sharding = Sharding{Strategy: ZeRO2, GPUs: 4, CPUOffload: OffloadOptimizer}
	tx, _, err := PhasePeak{Coef: DefaultCoefficients}.terms(x)
	if err != nil {
		t.Fatal(err)
	}
	if tx.OptTransient == 0 {
		t.Fatal("foreach AdamW has no step buffer to offload")
	}
	// ZeRO-Offload copies each reduced bucket to the gradient partition in
	// host RAM (deepspeed.go): neither the partition nor the step buffer
	// is on the GPU.
	if got := est(t, x).Phases.Step; got != 0 {
		t.Errorf("zero2 with the optimizer offloaded: step phase %d B on the GPU, want none (gradient partition and step in host RAM)", got)
	}
	// DeepSpeed would step its flat partitions with torchao's optimizer.
	x = r
	x.Sharding = Sharding{Strategy: ZeRO2, GPUs: 4}
	var fe *FieldError
	if _, err := x.Normalize(); !errors.As(err, &fe) || fe.Field != "optimizer" {
		t.Errorf("torchao's AdamW8bit under ZeRO-2: want a field error on optimizer, got %v", err)
	}
}
