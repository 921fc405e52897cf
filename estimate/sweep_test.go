package estimate

import (
	"slices"
	"testing"

	"github.com/canifinetune/canifinetune/catalog"
	"github.com/canifinetune/canifinetune/hfconfig"
)

// Every catalog model under every stack, method, checkpointing mode and
// sharding, with accumulation and dynamic padding, gives an estimate with no
// negative component and ordered levels (allocated ≤ reserved ≤ process).
func TestSweepNoNegativeComponents(t *testing.T) {
	if testing.Short() {
		t.Skip("sweeps the catalog")
	}
	n := 0
	for _, e := range catalog.All() {
		m, err := hfconfig.Parse(e.Config)
		if err != nil {
			continue // refused models are tested where they are refused
		}
		for _, st := range Stacks() {
			for _, method := range []Method{Full, LoRA, QLoRA} {
				for _, ck := range []string{"none", "full", "unsloth", "selective-op"} {
					for _, sh := range []Sharding{{}, {Strategy: "fsdp_full_shard", GPUs: 4}, {Strategy: "zero2", GPUs: 2}} {
						r := Request{Model: m, Method: method, LoRARank: 16, SeqLen: 1024, Batch: 2, GradCkpt: Checkpointing(ck),
							GradAccum: 4, DynamicShapes: true, Sharding: sh, GPUTotal: 80 * GiB}
						if method == Full {
							r.LoRARank = 0 // no adapters to rank
						}
						st.Apply(&r)
						_, nerr := r.Normalize()
						outside := len(st.Methods) > 0 && !slices.Contains(st.Methods, method) ||
							len(st.ModelTypes) > 0 && !slices.Contains(st.ModelTypes, m.ModelType) ||
							st.Name == StackTorchtitan && (sh.Strategy == "zero2" || ck == "unsloth") ||
							ck == "selective-op" && (m.Experts > 0 || m.Encoder || m.Seq2Seq != nil || method != Full || !slices.Contains(torchtitanModelTypes, m.ModelType))
						if outside {
							// A stack outside its methods and models, or the
							// per-op policy off a dense decoder: a refusal.
							if nerr == nil {
								t.Errorf("%s %s %s %s: accepted outside the stack's or policy's domain", e.ID, st.Name, method, ck)
							}
							continue
						}
						if nerr != nil && (m.Seq2Seq != nil || m.ExpertParameters) {
							// What a stack sets that an encoder-decoder model
							// has not (FlashAttention for T5, Liger kernels),
							// or a QLoRA base for fused expert parameters: a
							// refusal, tested in seq2seq_test.go.
							continue
						}
						est, err := PhasePeak{Coef: DefaultCoefficients}.Estimate(r)
						if err != nil {
							t.Fatalf("%s %s %s %s %v: %v", e.ID, st.Name, method, ck, sh, err)
						}
						for _, c := range est.Components {
							if c.Bytes < 0 {
								t.Errorf("%s %s %s %s %v: %s = %d", e.ID, st.Name, method, ck, sh, c.Name, c.Bytes)
							}
						}
						if l := est.Levels; l.Allocated > l.Reserved || l.Reserved > l.Process {
							t.Errorf("%s %s %s %s %v: levels %+v out of order", e.ID, st.Name, method, ck, sh, l)
						}
						n++
					}
				}
			}
		}
	}
	if n < 1000 {
		t.Errorf("swept only %d requests", n)
	}
}
