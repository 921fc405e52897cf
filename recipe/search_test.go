package recipe

import (
	"testing"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/plan"
)

// TestSearchOffersOnlyWhatRecipesWrite: every plan the search ranks for the
// documented demos (a 7B on one 24 GB card, a 70B full fine-tune on 8×80 GB,
// a 70B on 2 nodes × 8×80 GB) is one Files writes: the search's levers and
// the recipes' refusals read the same rules (plan/runs.go), so a lever the
// stacks cannot run fails here.
func TestSearchOffersOnlyWhatRecipesWrite(t *testing.T) {
	est, err := estimate.ByName("")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id                 string
		method             estimate.Method
		gib                float64
		perNode, nodes, eb int64
		stack              estimate.StackName
	}{
		{"Qwen/Qwen2.5-7B", "", 24, 1, 1, 16, ""},
		{"meta-llama/Llama-3.1-70B", estimate.Full, 80, 8, 1, 16, ""},
		{"meta-llama/Llama-3.1-70B", "", 80, 8, 2, 16, ""},
		{"Qwen/Qwen2.5-7B", "", 24, 1, 1, 16, estimate.StackLitGPT},
		{"meta-llama/Llama-3.1-8B", "", 80, 4, 1, 16, estimate.StackLitGPT},
		{"Qwen/Qwen2.5-7B", "", 24, 1, 1, 16, estimate.StackTorchtune},
		{"meta-llama/Llama-3.1-70B", "", 80, 8, 2, 16, estimate.StackTorchtune},
	} {
		req := estimate.Request{Model: catalogModel(t, tc.id), Method: tc.method, SeqLen: 2048, Batch: 1, GPUTotal: int64(tc.gib * estimate.GiB)}
		if tc.stack != "" {
			tc.stack.Spec().Apply(&req)
		}
		o := plan.Options{Estimator: est,
			Request: req,
			Goal:    plan.Goal{DatasetTokens: 1e8, Epochs: 1, EffectiveBatch: tc.eb},
			Space:   plan.Space{GPUsPerNode: tc.perNode, Nodes: tc.nodes, ShorterSeqs: true}}
		res, err := plan.Search(o)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Plans) == 0 {
			t.Fatalf("%s %s on %d×%d: no plan fits", tc.stack, tc.id, tc.nodes, tc.perNode)
		}
		refused := 0
		for i, p := range res.Plans {
			if err := Check(Input{ModelID: tc.id, Plan: p}); err != nil {
				if refused++; refused <= 3 {
					t.Errorf("%s %s on %d×%d: plan %d (%s, %s, offload %s, %s): %v", tc.stack, tc.id, tc.nodes, tc.perNode, i+1,
						p.Request.Method, p.Request.Sharding.Strategy, p.Request.Sharding.CPUOffload, p.Request.Optimizer, err)
				}
			}
		}
		if refused > 0 {
			t.Errorf("%s %s on %d×%d: %d of %d plans refused", tc.stack, tc.id, tc.nodes, tc.perNode, refused, len(res.Plans))
		}
	}
}
