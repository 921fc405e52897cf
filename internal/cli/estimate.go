package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/canifinetune/canifinetune/internal/report"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/modelsource"
	"github.com/canifinetune/canifinetune/placement"
)

// EstimateCmd is `canifinetune estimate`.
type EstimateCmd struct {
	Model      string `arg:"" help:"Hub id as org/name[@revision] (the embedded catalog first, else the Hub), or a local directory (config.json, *.safetensors) / config.json."`
	ModelFlags `embed:""`

	RequestFlags `embed:""`

	SimulateFlags `embed:""`

	GPU         string            `help:"GPU from the embedded table (rtx-4090, a100-80gb, h100; see 'canifinetune gpus'), or auto: the detected card with the most free memory (the default when no --gpu, --gpus or --gpu-vram-gb is given)."`
	GPUs        string            `name:"gpus" placeholder:"LIST" help:"The run's GPUs: cards by name (4xA100-80GB, 2xH100,1x4090) or detected indices (0,2). Sets the data-parallel world size, and the GPUs a model too large for one is placed across."`
	VRAMFlag    *float64          `name:"gpu-vram-gb" placeholder:"FLOAT-64" help:"The card's total memory in GiB, instead of --gpu; sizes the overhead allowances."`
	FreeFlag    *float64          `name:"available-vram-gb" placeholder:"FLOAT-64" help:"Memory free for the run in GiB (see 'canifinetune doctor'); the verdict compares with it. Default: the card's total."`
	Strategy    estimate.Strategy `enum:"${strategy_enum}" default:"none" help:"Data-parallel sharding:${strategy_values}"`
	NumGPUs     int64             `name:"num-gpus" help:"GPUs per node of the data-parallel run (default: as many as --gpus names, else the detected GPUs, else 1)."`
	Nodes       int64             `default:"1" help:"Nodes of a data-parallel run: the world size is nodes × GPUs per node (fsdp_hybrid_shard shards within a node)."`
	Offload     estimate.Offload  `enum:"${cpu_offload_enum}" default:"none" help:"CPU offload with sharding:${cpu_offload_values}"`
	Estimator   string            `default:"" help:"Estimator: canifinetune (default: phase-peak model fitted on measured runs), reference or seed000 (the reference model of docs/memory-model.md, summed term by term), unsloth (Unsloth Studio's estimator)."`
	Calibration string            `type:"path" help:"A calibration file from 'canifinetune calibrate'; applied to the default estimator only inside its domain."`
	JSON        bool              `help:"Print JSON (bytes and GiB) instead of a table."`

	// GPUVRAMGB and AvailableGB are --gpu-vram-gb and --available-vram-gb
	// once checked (checkMemoryFlags): 0 means not given, so a given 0 must
	// be refused before it gets here.
	GPUVRAMGB   float64 `kong:"-"`
	AvailableGB float64 `kong:"-"`
}

// Help implements kong's HelpProvider.
func (c *EstimateCmd) Help() string {
	return `Estimates the peak GPU memory of one fine-tuning step, component by component,
and says whether it fits: yes (≤ 85 % of the budget), marginal (≤ 97 %) or no.

Examples:
  canifinetune estimate Qwen/Qwen2.5-7B --method qlora --seq-len 2048 --batch 1 --gpu rtx-4090
  canifinetune estimate ./my-model/ --method lora --rank 16 --targets all-linear \
      --gpu-vram-gb 24 --available-vram-gb 21.5 --json
  canifinetune estimate Qwen/Qwen2.5-7B --method full --gpus 4xA100-80GB --strategy zero3
  canifinetune estimate Qwen/Qwen2.5-32B --method lora --gpus 0,2
  canifinetune estimate org/new-model@main --gpu a100-80gb      (from the Hub: exact counts)
  canifinetune estimate Qwen/Qwen2.5-7B --hub --offline         (exact counts from the HF cache)

Models resolve in this order: an existing local path; the embedded catalog
(unless --hub); the Hub, or with --offline / HF_HUB_OFFLINE=1 only the
Hugging Face cache. From the Hub only config.json and each shard's
safetensors header are read (HTTP Range requests), never the weights; the
token (HF_TOKEN, HF_TOKEN_PATH) is never printed.

Without --gpu, --gpus or --gpu-vram-gb the GPUs are detected (nvidia-smi or
rocm-smi, at most 3 s): the card with the most free memory is the budget.
A run that does not fit one GPU, with several GPUs and no --strategy, is
placed across them (most free memory first, each GPU beyond the first counted
at 85 %, as many as a yes needs; --estimator unsloth keeps Unsloth Studio's
rule and stops once they cover the requirement). With --strategy the
components are per GPU. The memory model and its sources: docs/memory-model.md.

Numbers out of range are usage errors that say what is accepted, and so are
requests that cannot run: CPU offload under ddp (or parameter offload under
zero1/zero2), LoRA flags with --method full, --extra-trainable other than an
embedding or output layer, a --rank above every targeted module's width,
flash_attention_2 on a GPU older than Ampere (T4, V100). What runs but
probably not as meant is a warning, printed before the table and listed in
--json "warnings": a --seq-len beyond the model's context
(max_position_embeddings), bf16 on a GPU without native bf16, a --rank above
some targeted module's width.

The planning proxy (total − safety margin) is what a measured reserved peak
(torch.cuda.max_memory_reserved) is compared with. Overheads are sized from
the card's total memory; the verdict compares with the free memory when given.

Exit codes: 0 fits (or no GPU given or detected), 3 marginal, 4 does not fit, 1 error, 2 usage.`
}

// Run implements the command.
func (c *EstimateCmd) Run(env *Env) error {
	c.RequestFlags.canonicalize()
	rm, err := resolveModel(context.Background(), env, c.Model, c.ModelFlags)
	if err != nil {
		return err
	}
	est, err := estimate.ByName(c.Estimator)
	if err != nil {
		return usageErrorf("canifinetune estimate --help", "%v", err)
	}
	if c.Calibration != "" {
		if est.Name() != estimate.Default {
			return usageErrorf("drop --estimator, or drop --calibration", "--calibration applies to the default estimator, not %s", est.Name())
		}
		if est, err = loadCalibration(c.Calibration); err != nil {
			return err
		}
	}
	req, err := requestFromFlags(c.RequestFlags, rm)
	if err != nil {
		return err
	}
	// An alias (fsdp, zero-3) is read as its strategy before the GPU
	// setup and the report use the name.
	canon(&c.Strategy, estimate.ParseStrategy)
	req.Sharding = estimate.Sharding{Strategy: c.Strategy, GPUs: c.NumGPUs, CPUOffload: c.Offload}
	if err := c.checkMemoryFlags(); err != nil {
		return err
	}
	if c.Python != "" && !c.Simulate {
		return usageErrorf("canifinetune estimate MODEL --simulate --python PATH", "--python is the interpreter of --simulate; add --simulate")
	}
	if c.SimulateTimeout <= 0 {
		return usageErrorf("--simulate-timeout 5m", "--simulate-timeout must be a positive duration")
	}
	// Every number and combination of the flags is checked here, before any
	// GPU is detected; the GPU's own limits are checked by the estimate.
	// A sharded run's world size may still come from the GPUs detected
	// below (resolveGPUs sizes it, or says which flag to give), so this
	// check stands in two GPUs for it.
	pre := req
	if pre.Sharding.GPUs == 0 {
		pre.Sharding.GPUs = 2
	}
	if _, err := pre.Normalize(); err != nil {
		return requestUsageError(err)
	}
	gs, err := c.resolveGPUs(env)
	if err != nil {
		return err
	}
	gs.Apply(&req)
	plan, err := placement.Evaluate(est, req, gs.GPUs(est.Name(), c.Nodes))
	if err != nil {
		if errors.Is(err, estimate.ErrInvalidRequest) {
			return requestUsageError(err)
		}
		return err
	}
	x, err := est.Explain(req, plan.Estimate)
	if err != nil {
		return err
	}
	out := report.NewEstimate(rm, gs.Card, req, plan.Estimate, x, plan.Changes)
	out.NoteLengths(lengthsFrom(c.RequestFlags), c.SeqLen)
	out.Annotate(gs.Setup, plan)
	out.Detection = gs.detection
	if c.Simulate {
		if out.Simulation, err = c.simulate(env, rm, out, plan.Estimate.Phases); err != nil {
			return err
		}
	}
	if c.JSON {
		if err := writeJSON(env.Stdout, out); err != nil {
			return err
		}
	} else {
		printEstimate(env.Stdout, out)
	}
	switch estimate.Fit(out.Verdict.Fit) {
	case estimate.FitMarginal:
		return verdictExit(ExitMarginal)
	case estimate.FitNo:
		return verdictExit(ExitNoFit)
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printEstimate(w io.Writer, o report.Estimate) {
	src := o.Model.From
	if o.Model.CatalogEntry != "" {
		src = "catalog entry " + o.Model.CatalogEntry
	}
	fmt.Fprintf(w, "%s (%s, %s, %.2fB params; estimator %s %s)\n", o.Model.Name, o.Model.ModelType, src, float64(o.Model.Params)/1e9, o.Estimator.Name, o.Estimator.Version)
	fmt.Fprintln(w, paramsLine(o.Model))
	for _, n := range o.Model.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	cfg := o.Config
	line := fmt.Sprintf("%s %s, seq %d × batch %d, %s, ckpt %s, attn %s", cfg.Method, cfg.Precision, cfg.SeqLen, cfg.Batch, cfg.Optimizer, cfg.GradCkpt, cfg.Attn)
	if cfg.TargetLen > 0 {
		line = fmt.Sprintf("%s %s, source %d + target %d × batch %d, %s, ckpt %s, attn %s", cfg.Method, cfg.Precision, cfg.SeqLen, cfg.TargetLen, cfg.Batch, cfg.Optimizer, cfg.GradCkpt, cfg.Attn)
	}
	if cfg.GradAccum > 1 {
		line += fmt.Sprintf(", %d micro-batches per update", cfg.GradAccum)
	}
	if cfg.LongestFirst {
		line += ", longest sample first"
	}
	if cfg.Dynamic {
		line += ", padded to each batch's longest"
		if cfg.SeqLenP50 > 0 {
			from := ""
			if d, ok := strings.CutPrefix(cfg.LengthsFrom, "dataset "); ok {
				from = ", " + d + "'s lengths"
			}
			line += fmt.Sprintf(" (median sample %d tokens%s)", cfg.SeqLenP50, from)
		}
		if cfg.SeqLenBound > 0 {
			line += fmt.Sprintf(", longest sample %d under the --seq-len %d bound", cfg.SeqLen, cfg.SeqLenBound)
		}
	}
	if cfg.Method != "full" {
		line += fmt.Sprintf(", rank %d on %s", cfg.Rank, strings.Join(cfg.Targets, ","))
		if cfg.Dropout > 0 {
			line += fmt.Sprintf(" (dropout %g)", cfg.Dropout)
		}
	}
	if cfg.Strategy != "none" {
		line += fmt.Sprintf(", %s over %d GPUs (per GPU)", cfg.Strategy, cfg.NumGPUs)
	}
	fmt.Fprintf(w, "%s; trainable %s params\n", line, humanCount(o.Model.TrainableParams))
	for _, warn := range o.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "component\tGiB\tshare\t")
	for _, c := range o.Components {
		fmt.Fprintf(tw, "%s\t%.2f\t%.1f%%\t\n", c.Name, c.GB, 100*c.Share)
	}
	fmt.Fprintf(tw, "total\t%.2f\t\t\n", o.TotalGB)
	tw.Flush()
	fmt.Fprintf(w, "\nplanning proxy (total − safety margin: what the run needs): %.2f GiB\n", o.ProxyGB)
	fmt.Fprintf(w, "predicted peaks to compare with measurements: allocated %.2f GiB, reserved %.2f GiB, process (nvidia-smi) %.2f GiB\n", o.Levels.AllocatedGB, o.Levels.ReservedGB, o.Levels.ProcessGB)
	printGPUSetup(w, o)
	if o.PagedOptimizerGB > 0 {
		fmt.Fprintf(w, "paged optimizer states in CUDA unified memory: %.2f GiB per GPU, outside the caching allocator (in the process level only; under memory pressure they page to host RAM instead of failing the run)\n", o.PagedOptimizerGB)
	}
	if o.HostOffloadGB > 0 && o.DataParallel == nil {
		fmt.Fprintf(w, "host RAM for CPU offload: %.2f GiB per GPU process\n", o.HostOffloadGB)
	}
	fmt.Fprintf(w, "confidence: %s — %s\n", o.Confidence.Grade, o.Confidence.Reason)
	if len(o.Changes) > 0 {
		fmt.Fprintln(w, "\nchanges that make it fit (each line alone; cheapest first):")
		for i, ch := range o.Changes {
			if i == maxChangesShown {
				fmt.Fprintf(w, "  … and %d more (--json lists them all)\n", len(o.Changes)-i)
				break
			}
			fmt.Fprintf(w, "  %-32s total %.2f GiB, ratio %.2f (saves %.2f GiB); %s\n", ch.Change, ch.TotalGB, ch.Ratio, ch.SavesGB, costWords(ch))
		}
	} else if o.Verdict.Fit == "no" || o.Verdict.Fit == "marginal" {
		fmt.Fprintln(w, "\nno single change or pair of them (checkpointing, fused loss, 8-bit optimizer, sharding or CPU offload, a stack, LoRA/QLoRA, half batch or sequence) makes it fit: combine more, or use a larger GPU or several")
	}
	fmt.Fprintln(w, "\nassumptions:")
	for _, a := range o.Assumptions {
		fmt.Fprintf(w, "  - %s\n", a)
	}
	if o.Simulation != nil {
		printSimulation(w, o.Simulation)
	}
}

// maxChangesShown bounds the table's list of changes; --json has them all.
const maxChangesShown = 8

// costWords is a change's cost in a few words: added compute, host traffic,
// and whether the trained result changes.
func costWords(ch report.Change) string {
	var w []string
	if ch.ExtraCompute > 0 {
		w = append(w, fmt.Sprintf("+%.0f %% compute", 100*ch.ExtraCompute))
	}
	if ch.OffloadGB > 0 {
		w = append(w, fmt.Sprintf("~%.2f GiB host traffic per step", ch.OffloadGB))
	}
	if ch.ChangesResult {
		w = append(w, "changes the result")
	}
	if len(w) == 0 {
		return "no added compute"
	}
	return strings.Join(w, ", ")
}

// paramsLine says which parameter count the estimate used and where it came
// from, so a reader knows whether it is exact.
func paramsLine(m report.Model) string {
	if m.ParamsSource == modelsource.ParamsFromSafetensors {
		shards := "1 shard"
		if m.Shards != 1 {
			shards = fmt.Sprintf("%d shards", m.Shards)
		}
		return fmt.Sprintf("params: %s exact, from the safetensors headers of %s (config.json implies %s)", groupDigits(m.Params), shards, groupDigits(m.ConfigParams))
	}
	return fmt.Sprintf("params: %s derived from config.json (exact counts: --hub, or a local directory with *.safetensors)", groupDigits(m.Params))
}

// groupDigits writes n with thousands separators: 7,615,616,512.
func groupDigits(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}
