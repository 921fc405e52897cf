package estimate

import "testing"

// FSDP's SHARD_GRAD_OP keeps every unit's gathered parameters from its
// forward to the backward beside the rank's shard (FlatParameter's
// _full_param_padded and _local_shard): the default estimator's weights are
// the whole model in the gather dtype plus a 1/N shard in the stored dtype.
// The reference estimator keeps its whole-weights reading, and with the
// parameters offloaded to the CPU the shard is in host RAM.
func TestShardGradOpKeepsUnshardedAndShard(t *testing.T) {
	m := catalogModel(t, "openlm-research/open_llama_3b")
	p := m.Params()
	const n = 2
	for _, tc := range []struct {
		name string
		r    Request
		want int64
	}{
		{"full bf16-true", Request{Method: Full, Precision: BF16True}, 2*p + (2*p+n-1)/n},
		{"full bf16-mixed: bf16 gathered, fp32 shard", Request{Method: Full, Precision: BF16Mixed}, 2*p + (4*p+n-1)/n},
	} {
		r := tc.r
		r.Model, r.SeqLen, r.Batch, r.Optimizer = m, 512, 1, SGD
		r.Sharding = Sharding{Strategy: FSDPShardGradOp, GPUs: n, CPUOffload: OffloadNone}
		if got, _ := est(t, r).Component(CWeights); got != tc.want {
			t.Errorf("%s: weights %d, want %d", tc.name, got, tc.want)
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
		got, _ := ref.Component(CWeights)
		want, _ := refOne.Component(CWeights)
		if got != want {
			t.Errorf("%s: the reference's weights moved to %d from its one-GPU %d", tc.name, got, want)
		}
		off := r
		off.Sharding.CPUOffload = OffloadParamsOptimizer
		if keepsUnshardedAndShard(off) {
			t.Errorf("%s: with the parameters on the CPU the rank's shard is not on the GPU", tc.name)
		}
	}
}
