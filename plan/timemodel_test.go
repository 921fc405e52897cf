package plan

import (
	"math"
	"testing"

	"github.com/canifinetune/canifinetune/estimate"
)

// TestAttendedKeys: the keys a token attends to on average under a causal
// mask: half the sequence, min(i, w) on a sliding window, all of them for
// eager attention.
func TestAttendedKeys(t *testing.T) {
	for _, c := range []struct {
		name          string
		window, seq   int64
		attn          estimate.Attention
		full, sliding float64
	}{
		{"sdpa, no window", 0, 8192, estimate.SDPA, 4096, 4096},
		{"flash, window 4096 of 8192", 4096, 8192, estimate.FlashAttention2, 4096, 4096 - 4096.0*4096/(2*8192)},
		{"window longer than the sequence", 8192, 2048, estimate.SDPA, 1024, 1024},
		{"eager computes every score", 4096, 8192, estimate.Eager, 8192, 8192},
	} {
		full, sliding := AttendedKeys(Shape{Window: c.window}, estimate.Request{SeqLen: c.seq, Attn: c.attn})
		if full != c.full || sliding != c.sliding {
			t.Errorf("%s: %v, %v; want %v, %v", c.name, full, sliding, c.full, c.sliding)
		}
	}
}

// TestStepTimeDequant: QLoRA's dequantization is memory traffic per
// micro-batch at the card's bandwidth, outside the utilisation; without a
// bandwidth it is not timed.
func TestStepTimeDequant(t *testing.T) {
	m := smallLlama(t)
	r := estimate.Request{Model: m, Method: estimate.QLoRA, LoRARank: 8, LoRATargets: []string{"q_proj"}, SeqLen: 512, GradCkpt: "none", Sharding: estimate.Sharding{Strategy: "none"}}
	f := FLOPs{Train: 1e6, DequantBytes: 5e9}
	hw := Hardware{PeakTFLOPs: 100, MFU: 0.5, MemBytesPerSec: 1e12}
	l := layout{world: 1, perNode: 1, nodes: 1, micro: 2, accum: 3}
	tm := StepTime(hw, r, &estimate.Estimate{}, f, m.Params(), l)
	if want := 3 * 5e9 / 1e12; math.Abs(tm.Dequant-want) > 1e-15 {
		t.Errorf("dequant %v s, want %v (3 micro-batches × 5 GB at 1 TB/s)", tm.Dequant, want)
	}
	if want := tm.Compute + tm.Dequant; math.Abs(tm.Step-want) > 1e-15 {
		t.Errorf("step %v, want compute + dequant %v", tm.Step, want)
	}
	hw.MemBytesPerSec = 0
	if tm := StepTime(hw, r, &estimate.Estimate{}, f, m.Params(), l); tm.Dequant != 0 {
		t.Errorf("dequant %v without a bandwidth", tm.Dequant)
	}
}

// TestClassOf sorts the cohort's cards into the two utilisation classes.
func TestClassOf(t *testing.T) {
	for name, want := range map[string]GPUClass{
		"NVIDIA GeForce RTX 4090": Workstation, "NVIDIA RTX A6000": Workstation, "NVIDIA RTX 6000 Ada Generation": Workstation,
		"NVIDIA A100-SXM4-80GB": Datacenter, "NVIDIA H100 80GB HBM3": Datacenter, "NVIDIA L40S": Datacenter, "AMD Instinct MI300X": Datacenter,
	} {
		if got := ClassOf(name); got != want {
			t.Errorf("ClassOf(%q) = %s, want %s", name, got, want)
		}
	}
}
