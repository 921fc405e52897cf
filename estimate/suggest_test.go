package estimate

import (
	"slices"
	"strings"
	"testing"
)

// changeWhats lists the flag strings of changes.
func changeWhats(cs []Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.What)
	}
	return out
}

func TestChangesSearchesLevers(t *testing.T) {
	llama8 := catalogModel(t, "meta-llama/Llama-3.1-8B")
	qwen7 := catalogModel(t, "Qwen/Qwen2.5-7B")
	est, _ := ByName(Default)
	for _, tt := range []struct {
		name  string
		req   Request
		space SearchSpace
		// want must be among the changes, with its lever and cost; absent
		// must not.
		want       string
		wantLever  Lever
		wantResult bool
		wantOff    bool
		absent     string
	}{
		{
			// No single flag is enough on 12 GiB; the unsloth stack sets
			// checkpointing, a chunked loss and an 8-bit optimizer at once.
			name: "stack on a 12 GiB card", req: Request{Model: llama8, Method: QLoRA, SeqLen: 2048, Batch: 1, GPUTotal: 12 * GiB},
			want: "--stack unsloth", wantLever: LeverStack,
		},
		{
			// DDP replicates everything; sharding over the four GPUs fits
			// with checkpointing (at 4096 tokens: a 2048-token full
			// fine-tune's activations fit beside ZeRO-3 without it).
			name: "sharding over the GPUs", req: Request{Model: qwen7, Method: Full, SeqLen: 4096, Batch: 1, GPUTotal: 24 * GiB, Sharding: Sharding{Strategy: "ddp", GPUs: 4}},
			space: SearchSpace{GPUsPerNode: 4, Nodes: 1},
			want:  "--grad-ckpt full --strategy zero3 --offload optimizer", wantLever: LeverGradCkpt, wantOff: true,
		},
		{
			// One GPU: no sharding is proposed.
			name: "one GPU has no sharding", req: Request{Model: qwen7, Method: Full, SeqLen: 2048, Batch: 1, GPUTotal: 24 * GiB},
			want: "--grad-ckpt full --method qlora", wantLever: LeverGradCkpt, wantResult: true, absent: "--strategy",
		},
		{
			// A run that already uses FSDP is offered FSDP, not ZeRO.
			name: "fsdp stays fsdp", req: Request{Model: qwen7, Method: Full, SeqLen: 4096, Batch: 1, GPUTotal: 24 * GiB, Sharding: Sharding{Strategy: "fsdp_no_shard", GPUs: 4}},
			space: SearchSpace{GPUsPerNode: 4, Nodes: 1},
			want:  "--grad-ckpt full --strategy fsdp_full_shard --offload params+optimizer", wantLever: LeverGradCkpt, wantOff: true, absent: "zero",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, err := est.Estimate(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if e.Verdict.Fit == FitYes {
				t.Fatalf("the request fits already (ratio %.2f): not a test of the search", e.Verdict.Ratio)
			}
			cs := Changes(est, tt.req, e.Verdict, tt.space)
			i := slices.IndexFunc(cs, func(c Change) bool { return c.What == tt.want })
			if i < 0 {
				t.Fatalf("changes %q lack %q", changeWhats(cs), tt.want)
			}
			c := cs[i]
			if c.Edits[0].Lever != tt.wantLever || c.Cost.ChangesResult != tt.wantResult || (c.Cost.OffloadBytes > 0) != tt.wantOff {
				t.Errorf("%s: lever %s, cost %+v; want lever %s, changes result %v, offload %v", c.What, c.Edits[0].Lever, c.Cost, tt.wantLever, tt.wantResult, tt.wantOff)
			}
			for _, c := range cs {
				if c.Verdict.Fit != FitYes || c.Estimate == nil || c.Saves <= 0 {
					t.Errorf("%s: verdict %s, saves %d; every change must fit and save memory", c.What, c.Verdict.Fit, c.Saves)
				}
				if tt.absent != "" && strings.Contains(c.What, tt.absent) {
					t.Errorf("%s: %q must not be proposed here", c.What, tt.absent)
				}
				// Re-estimating the changed request gives the same verdict.
				again, err := est.Estimate(c.Request)
				if err != nil || again.Total != c.Estimate.Total {
					t.Errorf("%s: re-estimate %v, %v; want total %d", c.What, again, err, c.Estimate.Total)
				}
			}
			if !slices.IsSortedFunc(cs, compareChanges) {
				t.Errorf("changes are not ranked by cost, then headroom: %q", changeWhats(cs))
			}
		})
	}
}

func TestChangesNothingToDo(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-7B")
	est, _ := ByName(Default)
	r := Request{Model: m, Method: QLoRA, SeqLen: 512, Batch: 1, GPUTotal: 80 * GiB}
	for _, v := range []Verdict{{Fit: FitYes, Ratio: 0.3}, {Fit: FitUnknown}} {
		if cs := Changes(est, r, v, SearchSpace{}); cs != nil {
			t.Errorf("verdict %s: changes %q, want none", v.Fit, changeWhats(cs))
		}
	}
}

// TestChangesJudge checks that the judge, not the estimator's own verdict,
// decides what fits (a multi-GPU caller judges by the placement).
func TestChangesJudge(t *testing.T) {
	m := catalogModel(t, "meta-llama/Llama-3.1-8B")
	est, _ := ByName(Default)
	r := Request{Model: m, Method: LoRA, SeqLen: 4096, Batch: 4, GPUTotal: 16 * GiB}
	var judged int
	onlyCkpt := func(q Request) (*Estimate, Verdict, error) {
		judged++
		e, err := est.Estimate(q)
		if err != nil {
			return nil, Verdict{}, err
		}
		if q.GradCkpt == "full" && q.FusedCE == "" && q.Stack == "" && q.Optimizer == "" && q.Method == LoRA && q.Batch == 4 && q.SeqLen == 4096 {
			return e, Verdict{Fit: FitYes, Ratio: 0.5}, nil
		}
		return e, Verdict{Fit: FitNo, Ratio: 2}, nil
	}
	cs := Changes(est, r, Verdict{Fit: FitNo, Ratio: 2}, SearchSpace{Judge: onlyCkpt})
	if got := changeWhats(cs); !slices.Equal(got, []string{"--grad-ckpt full"}) || judged < 2 {
		t.Errorf("changes %q after %d judgements, want only --grad-ckpt full", got, judged)
	}
	if len(cs) == 1 && (cs[0].Cost.ExtraCompute < 0.33 || cs[0].Cost.ExtraCompute > 0.34 || cs[0].Cost.ChangesResult) {
		t.Errorf("checkpointing cost %+v, want one more forward (~0.33) and the same result", cs[0].Cost)
	}
}

// TestChangesSkipsNoLeverStacks: a preset marked NoLever (llama-factory,
// whose differences are other levers' settings in the same Trainer) is never
// tried as a change, even where it alone would fit; the other presets are.
func TestChangesSkipsNoLeverStacks(t *testing.T) {
	m := catalogModel(t, "Qwen/Qwen2.5-7B")
	est, _ := ByName(Default)
	r := Request{Model: m, Method: QLoRA, SeqLen: 2048, Batch: 1, GPUTotal: 24 * GiB}
	var tried []StackName
	judge := func(q Request) (*Estimate, Verdict, error) {
		tried = append(tried, q.Stack)
		e, err := est.Estimate(q)
		if err != nil {
			return nil, Verdict{}, err
		}
		return e, Verdict{Fit: FitYes, Ratio: 0.5}, nil
	}
	Changes(est, r, Verdict{Fit: FitNo, Ratio: 2}, SearchSpace{Judge: judge})
	if slices.Contains(tried, StackLlamaFactory) {
		t.Error("--stack llama-factory was tried as a change")
	}
	if !slices.Contains(tried, StackUnsloth) {
		t.Errorf("stacks tried %q: the other presets are still levers", tried)
	}
}

// BenchmarkChanges measures one search on a 12 GiB card where no single
// flag is enough (singles, then pairs).
func BenchmarkChanges(b *testing.B) {
	m := catalogModel(b, "meta-llama/Llama-3.1-8B")
	est, _ := ByName(Default)
	r := Request{Model: m, Method: QLoRA, SeqLen: 2048, Batch: 1, GPUTotal: 12 * GiB}
	e, err := est.Estimate(r)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if cs := Changes(est, r, e.Verdict, SearchSpace{GPUsPerNode: 4, Nodes: 1}); len(cs) == 0 {
			b.Fatal("no change found")
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "searches/s")
}

// A paged optimizer fits a run by moving its states out of the allocator;
// where they cannot stay on the card beside the run, the change says so
// and counts their paging as host traffic (ranked after in-memory
// changes); where they can, it moves nothing.
func TestChangesPagedOptimizerTraffic(t *testing.T) {
	est, _ := ByName(Default)
	for _, tt := range []struct {
		model   string
		spills  bool
		wantSub string
	}{
		{"Qwen/Qwen2.5-7B", false, "stay on the card"},
		{"Qwen/Qwen2.5-14B", true, "paged to host RAM and back"},
	} {
		r := Request{Model: catalogModel(t, tt.model), Method: Full, SeqLen: 2048, Batch: 1, GPUTotal: 80 * GiB}
		e, err := est.Estimate(r)
		if err != nil {
			t.Fatal(err)
		}
		cs := Changes(est, r, e.Verdict, SearchSpace{})
		i := slices.IndexFunc(cs, func(c Change) bool { return c.What == "--optimizer paged_adamw_8bit" })
		if i < 0 {
			t.Fatalf("%s: no --optimizer paged_adamw_8bit among %v", tt.model, changeWhats(cs))
		}
		c := cs[i]
		over := c.Estimate.Total + c.Estimate.PagedOptimizer - c.Estimate.Verdict.Budget
		if (over > 0) != tt.spills {
			t.Fatalf("%s: total %d + paged %d vs budget %d: spill %v, want %v", tt.model, c.Estimate.Total, c.Estimate.PagedOptimizer, c.Estimate.Verdict.Budget, over > 0, tt.spills)
		}
		want := int64(0)
		if tt.spills {
			want = 2 * min(over, c.Estimate.PagedOptimizer)
		}
		if c.Cost.OffloadBytes != want {
			t.Errorf("%s: OffloadBytes %d, want %d", tt.model, c.Cost.OffloadBytes, want)
		}
		if !slices.ContainsFunc(c.Cost.Notes, func(n string) bool { return strings.Contains(n, tt.wantSub) }) {
			t.Errorf("%s: notes %q, want one saying %q", tt.model, c.Cost.Notes, tt.wantSub)
		}
	}
}
