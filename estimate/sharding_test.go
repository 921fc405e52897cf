package estimate

import "testing"

// FSDP's SHARD_GRAD_OP keeps every unit's gathered parameters from its
// forward to the backward beside the rank's shard (FlatParameter's
// _full_param_padded and _local_shard) and reshards after the backward: the
// default estimator's weights at a forward/backward peak are the whole model
// in the gather dtype plus a 1/N shard in the stored dtype (the gathered
// model is in the forward phase only: after the backward the rank holds its
// shard); with the parameters offloaded the
// shard is in host RAM and the gathered model still on the GPU. The
// reference estimator keeps its whole-weights reading.
// SHARD_GRAD_OP gathers its units in the compute dtype, so a mixed-precision
// full fine-tune's autocast has no fp32 weight to cast beside them: its
// activations, autocast's cache included, are FULL_SHARD's (a shard's cast
// each), not a whole 16-bit model more.
func TestShardGradOpNoAutocastCache(t *testing.T) {
	m := catalogModel(t, "openlm-research/open_llama_3b")
	const n = 8
	r := Request{Model: m, Method: Full, Precision: BF16Mixed, Optimizer: SGD, SeqLen: 512, Batch: 1,
		Sharding: Sharding{Strategy: FSDPShardGradOp, GPUs: n}}
	full := r
	full.Sharding.Strategy = "fsdp_full_shard"
	sgo, fs := est(t, r), est(t, full)
	if !sgo.Phases.ForwardPeak || !fs.Phases.ForwardPeak {
		t.Fatalf("forward peaks: SHARD_GRAD_OP %v, FULL_SHARD %v; the test reads the forward phase's activations", sgo.Phases.ForwardPeak, fs.Phases.ForwardPeak)
	}
	a, _ := sgo.Component(CActivations)
	b, _ := fs.Component(CActivations)
	if a != b {
		t.Errorf("activations: SHARD_GRAD_OP %d, FULL_SHARD %d; want equal (autocast's cache is a shard's cast in both; a whole model's would add %d)", a, b, 2*m.Params()*(n-1)/n)
	}
}

func TestShardGradOpKeepsUnshardedAndShard(t *testing.T) {
	m := catalogModel(t, "openlm-research/open_llama_3b")
	p := m.Params()
	const n = 2
	for _, tc := range []struct {
		name    string
		r       Request
		offload Offload
		want    int64
		fwdPeak bool
	}{
		{"full bf16-true, SGD: the backward is the peak", Request{Method: Full, Precision: BF16True, Optimizer: SGD, SeqLen: 512}, OffloadNone, 2*p + (2*p+n-1)/n, true},
		{"full bf16-mixed, SGD: bf16 gathered, fp32 shard", Request{Method: Full, Precision: BF16Mixed, Optimizer: SGD, SeqLen: 512}, OffloadNone, 2*p + (4*p+n-1)/n, true},
		{"parameters offloaded: the gathered model, no shard on the GPU", Request{Method: Full, Precision: BF16True, Optimizer: SGD, SeqLen: 512}, OffloadParamsOptimizer, 2 * p, true},
	} {
		r := tc.r
		r.Model, r.Batch = m, 1
		r.Sharding = Sharding{Strategy: FSDPShardGradOp, GPUs: n, CPUOffload: tc.offload}
		e := est(t, r)
		if got, _ := e.Component(CWeights); got != tc.want || e.Phases.ForwardPeak != tc.fwdPeak {
			t.Errorf("%s: weights %d (forward peak %v), want %d (%v)", tc.name, got, e.Phases.ForwardPeak, tc.want, tc.fwdPeak)
		}
		single := r
		single.Sharding = Sharding{}
		refOne, err := Reference{}.Estimate(single)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := Reference{}.Estimate(r)
		if err != nil {
			t.Fatal(err)
		}
		if tc.offload == OffloadNone {
			got, _ := ref.Component(CWeights)
			want, _ := refOne.Component(CWeights)
			if got != want {
				t.Errorf("%s: the reference's weights moved to %d from its one-GPU %d", tc.name, got, want)
			}
		}
	}
}

// With FULL_SHARD and the parameters offloaded, a rank's shard lives in host
// RAM and the GPU holds only the units it has gathered: the computing one and
// the prefetched one, each a whole layer of the model whatever the GPU count
// (FlatParamHandle copies the CPU shard to the device and all-gathers the
// unit). A rank's share of the model is not what two gathered layers weigh.
func TestParamOffloadKeepsTwoWholeLayers(t *testing.T) {
	m := catalogModel(t, "meta-llama/Llama-2-7b-hf")
	base := Request{Model: m, Method: LoRA, Precision: BF16True, LoRARank: 8, SeqLen: 512, Batch: 1, GradCkpt: CkptFull}
	one := est(t, base)
	w, _ := one.Component(CWeights)
	want := 2 * w / int64(len(m.Layers))
	for _, n := range []int64{2, 8} {
		r := base
		r.Sharding = Sharding{Strategy: FSDPFullShard, GPUs: n, CPUOffload: OffloadParamsOptimizer}
		e := est(t, r)
		got, _ := e.Component(CWeights)
		if got != want {
			t.Errorf("%d GPUs, parameters offloaded: weights %d on the GPU, want two whole layers, %d (of %d)", n, got, want, w)
		}
		if shard := w / n; e.HostOffload < shard {
			t.Errorf("%d GPUs: %d bytes in host RAM, want at least the rank's shard, %d", n, e.HostOffload, shard)
		}
	}
}

// A mixed-precision full fine-tune gathers its units in 16 bits under FSDP's
// MixedPrecision, so the two layers an offloading rank keeps are 16-bit
// layers, not fp32 ones; and under SHARD_GRAD_OP with the parameters
// offloaded only a rank's shard is in host RAM, less the more GPUs.
func TestParamOffloadDtypesAndHostShare(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-7B")
	r := Request{Model: m, Method: Full, Precision: BF16Mixed, SeqLen: 512, Batch: 1, GradCkpt: CkptFull,
		Sharding: Sharding{Strategy: FSDPFullShard, GPUs: 4, CPUOffload: OffloadParamsOptimizer}}
	got, _ := est(t, r).Component(CWeights)
	if want := 2 * 2 * m.Params() / int64(len(m.Layers)); got < want*95/100 || got > want*105/100 {
		t.Errorf("full bf16-mixed, parameters offloaded: weights %d on the GPU, want two 16-bit layers, about %d", got, want)
	}
	m2 := catalogModel(t, "meta-llama/Llama-2-7b-hf")
	host := map[int64]int64{}
	for _, n := range []int64{2, 8} {
		r := Request{Model: m2, Method: Full, Precision: BF16True, SeqLen: 512, Batch: 1, GradCkpt: CkptFull,
			Sharding: Sharding{Strategy: FSDPShardGradOp, GPUs: n, CPUOffload: OffloadParamsOptimizer}}
		host[n] = est(t, r).HostOffload
	}
	if host[8]*3 > host[2] {
		t.Errorf("SHARD_GRAD_OP, parameters and optimizer offloaded: host RAM %d per rank on 2 GPUs, %d on 8; want the shard's 4× fall", host[2], host[8])
	}
}
