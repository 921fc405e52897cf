package cli

import (
	"context"
	"errors"
	"fmt"
	"github.com/canifinetune/canifinetune/internal/bytesize"
	"github.com/canifinetune/canifinetune/internal/report"
	"math"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/modelsource"
	"github.com/canifinetune/canifinetune/plan"
	"github.com/canifinetune/canifinetune/recipe"
)

// PlanCmd is `canifinetune plan`.
type PlanCmd struct {
	Model      string `arg:"" help:"Hub id as org/name[@revision] (the embedded catalog first, else the Hub), or a local directory (config.json, *.safetensors) / config.json."`
	ModelFlags `embed:""`

	RequestFlags `embed:""`

	GPU      string   `help:"GPU from the embedded table (rtx-4090, a100-80gb, h100; see 'canifinetune gpus'), or auto: the detected card with the most free memory (the default when no --gpu, --gpus or --gpu-vram-gb is given)."`
	GPUs     string   `name:"gpus" placeholder:"LIST" help:"The GPUs of one node: cards by name (8xA100-80GB) or detected indices (0,2). Plans use 1 to all of them."`
	VRAMFlag *float64 `name:"gpu-vram-gb" placeholder:"FLOAT-64" help:"The card's total memory in GiB, instead of --gpu (no time: the table's peak is unknown; --peak-tflops gives one)."`
	FreeFlag *float64 `name:"available-vram-gb" placeholder:"FLOAT-64" help:"Memory free for the run in GiB; verdicts compare with it. Default: the card's total."`
	Nodes    int64    `default:"1" help:"Nodes with the GPUs of --gpus each; plans use 1 to all of them."`

	DatasetTokens *float64 `name:"dataset-tokens" placeholder:"1e8" help:"Tokens in one epoch of the dataset (or --samples × --mean-len)."`
	Samples       *float64 `placeholder:"N" help:"Samples in one epoch (with --mean-len)."`
	MeanLen       *float64 `name:"mean-len" placeholder:"TOKENS" help:"Mean tokens per sample (with --samples)."`
	Epochs        float64  `default:"1" help:"Passes over the dataset."`
	Effective     int64    `name:"effective-batch" placeholder:"16" help:"Sequences per optimizer update over all GPUs, kept by every plan (micro-batch × accumulation × GPUs). Default: --batch × --grad-accum when above 1, else 16."`
	Price         *float64 `name:"price-per-hour" placeholder:"USD" help:"Price of one GPU for an hour: plans get a cost."`
	Interconnect  string   `help:"The link data-parallel traffic crosses: nvlink, pcie, infiniband or ethernet. On one node it links the GPUs (default: nvlink for SXM datacenter cards, else pcie); across nodes it links the nodes (default: infiniband)."`
	MFU           *float64 `name:"mfu" placeholder:"MFU" help:"Model-FLOPs utilisation to assume instead of the GPU class's (0.59 workstation, 0.35 datacenter cards; fitted on measured training runs)."`
	PeakTFLOPs    *float64 `name:"peak-tflops" placeholder:"TFLOPS" help:"The GPU's dense 16-bit peak, when the table has none (or to override it)."`
	Maximize      string   `help:"Instead of ranking plans: the largest seq-len, batch or rank that fits with the request's own settings, by bisection on the estimator."`
	Top           int      `default:"10" help:"Plans shown in the table (--json lists every plan)."`
	JSON          bool     `help:"Print JSON (docs/plan-json.md) instead of a table."`
	Emit          string   `placeholder:"DIR" help:"Write the files that launch the first plan into DIR: TRL and HF Trainer + PEFT scripts with their configs, the accelerate config, the DeepSpeed JSON under ZeRO, launch.sh and a README (docs/recipes.md). DIR must be new or empty unless --force."`
	EmitPlan      int      `name:"emit-plan" placeholder:"N" help:"With --emit: write plan N of the ranking instead of the first."`
	Force         bool     `help:"With --emit: write into a directory that holds files, replacing those of the same name."`
}

// Help implements kong's HelpProvider.
func (c *PlanCmd) Help() string {
	return `Searches the configurations that fit the model on the GPUs — method, sequence
length up to the requested one, micro-batch × gradient accumulation at the same
effective batch, activation checkpointing, a fused loss kernel, an 8-bit
optimizer, DDP / FSDP / ZeRO-1/2/3 with and without CPU offload over 1..N GPUs
and nodes — keeps those whose verdict is yes, and ranks them: plans that train
the run as requested first, then by time to train, cost, fewer micro-batches
per update and memory headroom. Each plan says what it trades.

Examples:
  canifinetune plan Qwen/Qwen2.5-7B --gpu rtx-4090 --dataset-tokens 1e8
  canifinetune plan meta-llama/Llama-3.1-70B --method full --gpus 8xA100-80GB \
      --samples 50000 --mean-len 900 --epochs 3 --effective-batch 64 --price-per-hour 2.1
  canifinetune plan meta-llama/Llama-3.1-70B --gpus 8xH100 --nodes 2 --dataset-tokens 1e9
  canifinetune plan Qwen/Qwen2.5-7B --gpu rtx-4080 --method qlora --maximize seq-len

Time is a model, not a measurement: FLOPs per token from the model's shape
(6N for trained weights, 4N for frozen ones, the attention's s² term halved
under the causal mask, one more forward under checkpointing) divided by the
GPU's dense 16-bit peak from its datasheet times a model-FLOPs utilisation
(MFU), plus QLoRA's dequantization at the card's memory bandwidth and
data-parallel communication over the interconnect, overlapped with compute.
The MFU per GPU class (0.59 workstation, 0.35 datacenter) is fitted on
measured torchtune, torchtitan and fsdp_qlora runs (validate --throughput
evidence/throughput.jsonl reports the error). Sequences are assumed packed
(no padding). The model: docs/plan-json.md.

--emit DIR writes the files that launch the chosen plan (the first, or
--emit-plan N): train_trl.py with sft_config.json, train_hf.py with
training_args.json, model.json and lora_config.json (the model loading and
the adapters both scripts share), accelerate_config.yaml, ds_config.json
under ZeRO, launch.sh (torchrun or accelerate launch over the plan's GPUs and
nodes) and README.txt; with --stack litgpt or --stack torchtune, that
framework's litgpt.yaml or torchtune.yaml, launch.sh and README.txt instead.
Every memory-relevant setting in them is the one the estimate assumed. The
search offers only what the engines run as estimated
(under ZeRO, bf16-true is estimated as the bf16-mixed DeepSpeed runs; LitGPT
and torchtune get only the shardings they run); a
setting asked for that no stack reproduces (Unsloth's checkpointing, a chunked
loss) ranks its plans last and --emit refuses them with the reason and the
first plan that can be written. docs/recipes.md.
  canifinetune plan Qwen/Qwen2.5-7B --gpu rtx-4090 --dataset-tokens 1e8 --emit recipe/
  ./recipe/launch.sh trl torchrun data.jsonl

Exit codes: 0 plans found, 4 no plan fits (the output says which constraint
binds and how far off the nearest plan is), 1 error (a plan the stacks cannot
run as estimated), 2 usage (a bad flag; --emit into a directory that holds
files without --force).`
}

// Run implements the command.
func (c *PlanCmd) Run(env *Env) error {
	c.RequestFlags.canonicalize()
	if err := c.checkGoalFlags(); err != nil {
		return err
	}
	if err := c.checkEmitFlags(); err != nil {
		return err
	}
	rm, err := resolveModel(context.Background(), env, c.Model, c.ModelFlags)
	if err != nil {
		return err
	}
	est, err := estimate.ByName("")
	if err != nil {
		return err
	}
	req, err := requestFromFlags(c.RequestFlags, rm)
	if err != nil {
		return err
	}
	if _, err := req.Normalize(); err != nil {
		return requestUsageError(err)
	}
	gs, perNode, err := c.resolveGPUs(env)
	if err != nil {
		return err
	}
	if gs.Total == 0 {
		return usageErrorf("--gpu rtx-4090, --gpus 8xA100-80GB or --gpu-vram-gb 24", "plan needs the GPUs to plan for, and none was given or detected")
	}
	gs.Apply(&req)
	hw, hwNotes, err := c.hardware(gs, perNode)
	if err != nil {
		return err
	}
	opts := plan.Options{Estimator: est, Request: req, Goal: c.goal(), Hardware: hw,
		Space: plan.Space{GPUsPerNode: perNode, Nodes: c.Nodes, ShorterSeqs: true},
		Refuse: func(p plan.Plan) string {
			if p.Request.Stack == estimate.StackTorchtitan {
				// torchtitan runs what the search kept for it (plan's
				// runnable); only its config is not written.
				return ""
			}
			var r *recipe.Refusal
			if errors.As(recipe.Check(recipe.Input{ModelID: modelID(rm), Plan: p}), &r) {
				return r.Short()
			}
			return ""
		}}
	out := PlanJSON{SchemaVersion: 1, Estimator: report.Estimator{Name: est.Name(), Version: est.Version()},
		GPU: c.gpuJSON(gs, perNode, hw, req), Goal: goalJSON{DatasetTokens: opts.Goal.DatasetTokens, Epochs: opts.Goal.Epochs,
			EffectiveBatch: opts.Goal.EffectiveBatch, SeqLen: req.SeqLen, PricePerGPUHour: opts.Goal.PricePerGPUHour},
		TimeModel: newTimeModelJSON(hw), Plans: []planJSON{}, Notes: append(gs.Notes, hwNotes...)}
	if e, err := est.Estimate(req); err == nil {
		out.Model = report.NewEstimate(rm, gs.Card, req, e, estimate.Explanation{}, nil).Model
	}
	if c.Maximize != "" {
		return c.runMaximize(env, opts, rm, &out)
	}
	res, err := plan.Search(opts)
	if err != nil {
		if errors.Is(err, estimate.ErrInvalidRequest) {
			return requestUsageError(err)
		}
		return err
	}
	out.Search = searchJSON{Candidates: res.Candidates, Fits: res.Fits}
	for i, p := range res.Plans {
		out.Plans = append(out.Plans, newPlanJSON(i+1, p, res.Trades(p), rm.Name, lengthArgs(c.RequestFlags)))
	}
	if len(res.Plans) > 0 {
		out.Chosen = c.chosen(est, res.Plans[0], gs)
	} else {
		out.NoPlan = &noPlanJSON{Binding: res.Binding}
		if n := res.Nearest; n != nil {
			pj := newPlanJSON(0, *n, res.Trades(*n), rm.Name, lengthArgs(c.RequestFlags))
			out.NoPlan.Nearest = &pj
		}
	}
	if c.JSON {
		if err := writeJSON(env.Stdout, out); err != nil {
			return err
		}
	} else {
		printPlans(env.Stdout, out, c.Top)
	}
	if out.NoPlan != nil {
		return verdictExit(ExitNoFit)
	}
	if c.Emit != "" {
		// With --json stdout is the document alone; the note goes to stderr.
		tell := func(s string) { fmt.Fprintln(env.Stdout, s) }
		if c.JSON {
			tell = func(s string) { fmt.Fprintln(env.Stderr, s) }
		}
		return c.emit(res.Plans, rm, opts.Goal.Epochs, tell)
	}
	return nil
}

// checkGoalFlags checks the goal's numbers before anything is resolved.
func (c *PlanCmd) checkGoalFlags() error {
	finitePos := func(flag string, v *float64, hint string) error {
		if v != nil && !(*v > 0 && !math.IsInf(*v, 1)) {
			return usageErrorf(hint, "%s must be a positive number, got %v", flag, *v)
		}
		return nil
	}
	for _, f := range []struct {
		flag string
		v    *float64
		hint string
	}{{"--dataset-tokens", c.DatasetTokens, "--dataset-tokens 1e8"}, {"--samples", c.Samples, "--samples 50000 --mean-len 900"},
		{"--mean-len", c.MeanLen, "--samples 50000 --mean-len 900"}, {"--epochs", &c.Epochs, "--epochs 1"},
		{"--peak-tflops", c.PeakTFLOPs, "--peak-tflops 312"}} {
		if err := finitePos(f.flag, f.v, f.hint); err != nil {
			return err
		}
	}
	if c.Price != nil && !(*c.Price >= 0 && !math.IsInf(*c.Price, 1)) {
		return usageErrorf("--price-per-hour 2.5", "--price-per-hour must be a price of 0 or more, got %v", *c.Price)
	}
	if c.MFU != nil && !(*c.MFU > 0 && *c.MFU <= 1) {
		return usageErrorf("--mfu 0.35", "--mfu must be a fraction in (0, 1], got %v", *c.MFU)
	}
	switch {
	case c.DatasetTokens != nil && (c.Samples != nil || c.MeanLen != nil):
		return usageErrorf("--dataset-tokens 1e8  or  --samples 50000 --mean-len 900", "give the dataset as --dataset-tokens or as --samples × --mean-len, not both")
	case (c.Samples == nil) != (c.MeanLen == nil):
		return usageErrorf("--samples 50000 --mean-len 900", "--samples and --mean-len go together: the dataset's tokens are their product")
	case c.DatasetTokens == nil && c.Samples == nil && c.Maximize == "":
		return usageErrorf("--dataset-tokens 1e8  or  --samples 50000 --mean-len 900", "plan needs the dataset's size to say how long the run takes")
	}
	if c.Effective < 0 || c.Effective > estimate.MaxBatch*estimate.MaxGPUs {
		return usageErrorf("--effective-batch 16", "--effective-batch must be an integer in 1..%d, got %d", estimate.MaxBatch*estimate.MaxGPUs, c.Effective)
	}
	if c.Nodes < 1 || c.Nodes > 1024 {
		return usageErrorf("--nodes 2", "--nodes must be an integer in 1..1024, got %d", c.Nodes)
	}
	switch c.Maximize {
	case "", string(plan.MaxSeqLen), string(plan.MaxBatch), string(plan.MaxRank):
	default:
		return usageErrorf("--maximize seq-len", "--maximize %q: want seq-len, batch or rank", c.Maximize)
	}
	if c.Interconnect != "" && !isInterconnect(c.Interconnect) {
		return usageErrorf("--interconnect nvlink", "--interconnect %q: want nvlink, pcie, infiniband or ethernet", c.Interconnect)
	}
	return nil
}

func isInterconnect(s string) bool {
	for _, i := range plan.Interconnects {
		if string(i) == s {
			return true
		}
	}
	return false
}

// goal is the run's goal from the flags.
func (c *PlanCmd) goal() plan.Goal {
	g := plan.Goal{Epochs: c.Epochs, EffectiveBatch: c.Effective}
	switch {
	case c.DatasetTokens != nil:
		g.DatasetTokens = *c.DatasetTokens
	case c.Samples != nil:
		g.DatasetTokens = *c.Samples * *c.MeanLen
	}
	if g.EffectiveBatch == 0 {
		g.EffectiveBatch = plan.DefaultEffectiveBatch(c.Batch, c.GradAccum)
	}
	if c.Price != nil {
		g.PricePerGPUHour = *c.Price
	}
	return g
}

// requestFromFlags is the request the run flags describe, as estimate
// builds it.
func requestFromFlags(f RequestFlags, rm *modelsource.Resolved) (estimate.Request, error) {
	req := estimate.Request{
		Model: rm.Model, Method: f.Method, Precision: flagValue(f.Precision),
		Quant: flagValue(f.Quant), LoRATargets: f.Targets, ExtraTrainable: f.Extra,
		SeqLen: f.SeqLen, TargetLen: f.TargetLen, Batch: f.Batch, GradAccum: f.GradAccum, DynamicShapes: f.Dynamic, LongestFirst: f.LongestFirst, LoRADropout: f.Dropout,
		GradCkpt: flagValue(f.GradCkpt), Optimizer: flagValue(f.Optimizer),
		OptimizerStateDtype: flagValue(f.OptimDtype), Attn: flagValue(f.Attn), FusedCE: flagValue(f.FusedCE), Compile: f.Compile, EagerLoss: f.EagerLoss, FreesLogits: f.FreesLogits,
		Kernels: f.Kernels, OptimizerInBackward: f.OptInBwd, Task: flagValue(f.Task),
	}
	if f.Stack != nil {
		st, err := estimate.StackByName(string(*f.Stack))
		if err != nil {
			return req, usageErrorf("--stack hf-trainer", "%v", err)
		}
		st.Apply(&req)
	}
	if f.Rank != nil {
		if req.LoRARank = *f.Rank; req.LoRARank == 0 {
			return req, requestUsageError(&estimate.FieldError{Field: "lora_rank", Value: "0", Want: fmt.Sprintf("an integer in 1..%d", estimate.MaxLoRARank)})
		}
	}
	if f.GradAccum == 0 {
		return req, requestUsageError(&estimate.FieldError{Field: "grad_accum", Value: "0", Want: fmt.Sprintf("an integer in 1..%d", estimate.MaxGradAccum)})
	}
	lengths, err := lengthsFromFlags(f)
	if err != nil {
		return req, err
	}
	req.Lengths = lengths
	return req, nil
}

// resolveGPUs reads the GPU flags as estimate does and returns the GPUs per
// node a plan may use.
func (c *PlanCmd) resolveGPUs(env *Env) (*gpuSetup, int64, error) {
	ec := &EstimateCmd{VRAMFlag: c.VRAMFlag, FreeFlag: c.FreeFlag}
	if err := ec.checkMemoryFlags(); err != nil {
		return nil, 0, err
	}
	f := gpuFlags{GPU: c.GPU, GPUs: c.GPUs, VRAMGB: ec.GPUVRAMGB, AvailableGB: ec.AvailableGB, example: "8xA100-80GB"}
	s, err := f.resolve(env)
	if err != nil {
		return nil, 0, err
	}
	return s, s.NodeGPUs(c.Nodes), nil
}

// hardware is the time model's view of the GPUs (plan.HardwareFor) with
// the flags' choices.
func (c *PlanCmd) hardware(s *gpuSetup, perNode int64) (plan.Hardware, []string, error) {
	ch := plan.HardwareChoice{Link: plan.Interconnect(c.Interconnect)}
	if c.PeakTFLOPs != nil {
		ch.PeakTFLOPs = *c.PeakTFLOPs
	}
	if c.MFU != nil {
		ch.MFU = *c.MFU
	}
	hw, notes, err := plan.HardwareFor(s.Cards(), perNode, c.Nodes, ch)
	var le *plan.LinkError
	if errors.As(err, &le) {
		hint := "--interconnect pcie"
		if le.Inter {
			hint = "--interconnect infiniband"
		}
		return hw, nil, usageErrorf(hint, "%v", le.Err)
	}
	return hw, notes, err
}

// chosen is the first plan's estimate with its explanation.
func (c *PlanCmd) chosen(est estimate.Estimator, p plan.Plan, s *gpuSetup) *chosenJSON {
	q := p.Request
	e, err := est.Estimate(q)
	if err != nil {
		return nil
	}
	x, err := est.Explain(q, e)
	if err != nil {
		return nil
	}
	gb := func(b int64) float64 { return bytesize.RoundedGiB(b, 3) }
	ch := &chosenJSON{TotalGB: gb(e.Total), ProxyGB: gb(e.PlanningProxy),
		Verdict:       report.Verdict{Fit: string(e.Verdict.Fit), Ratio: bytesize.Round(e.Verdict.Ratio, 4), BudgetBytes: e.Verdict.Budget, BudgetGB: gb(e.Verdict.Budget), BudgetSource: e.Verdict.BudgetSource},
		HostOffloadGB: gb(e.HostOffload), Assumptions: x.Assumptions, Warnings: e.Warnings,
		Confidence: report.Confidence{Grade: string(x.Confidence.Grade), Reason: x.Confidence.Reason}}
	for _, comp := range e.Components {
		share := 0.0
		if e.Total > 0 {
			share = float64(comp.Bytes) / float64(e.Total)
		}
		ch.Components = append(ch.Components, report.Component{Name: string(comp.Name), Bytes: comp.Bytes, GB: gb(comp.Bytes), Share: bytesize.Round(share, 4), Source: x.Source(comp.Name)})
	}
	return ch
}

// runMaximize answers --maximize.
func (c *PlanCmd) runMaximize(env *Env, opts plan.Options, rm *modelsource.Resolved, out *PlanJSON) error {
	m, err := plan.Maximize(opts, plan.Quantity(c.Maximize))
	if err != nil {
		if errors.Is(err, estimate.ErrInvalidRequest) {
			return usageErrorf("--maximize seq-len", "%v", err)
		}
		return err
	}
	mj := &maximumJSON{Quantity: c.Maximize, Bound: m.Bound, Candidates: m.Candidates}
	if m.Plan != nil {
		mj.Value = m.Value
		pj := newPlanJSON(1, *m.Plan, nil, rm.Name, lengthArgs(c.RequestFlags))
		mj.Plan = &pj
	}
	out.Maximum = mj
	out.Search = searchJSON{Candidates: m.Candidates}
	if c.JSON {
		if err := writeJSON(env.Stdout, out); err != nil {
			return err
		}
	} else {
		printMaximum(env.Stdout, *out)
	}
	if m.Plan == nil {
		return verdictExit(ExitNoFit)
	}
	return nil
}
