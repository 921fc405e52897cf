package cli

import (
	"fmt"
	"github.com/canifinetune/canifinetune/internal/bytesize"
	"github.com/canifinetune/canifinetune/internal/report"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/plan"
	"github.com/canifinetune/canifinetune/recipe"
)

// PlanJSON is the stable --json schema of plan (schema_version 1,
// docs/plan-json.md).
type PlanJSON struct {
	SchemaVersion int              `json:"schema_version"`
	Estimator     report.Estimator `json:"estimator"`
	Model         report.Model     `json:"model"`
	GPU           planGPUJSON      `json:"gpu"`
	Goal          goalJSON         `json:"goal"`
	TimeModel     timeModelJSON    `json:"time_model"`
	Search        searchJSON       `json:"search"`
	// Plans fit, ranked; the first is the chosen one.
	Plans   []planJSON   `json:"plans"`
	Chosen  *chosenJSON  `json:"chosen_estimate,omitempty"`
	NoPlan  *noPlanJSON  `json:"no_plan,omitempty"`
	Maximum *maximumJSON `json:"maximum,omitempty"`
	Notes   []string     `json:"notes,omitempty"`
}

type planGPUJSON struct {
	Name        string  `json:"name,omitempty"`
	TotalGB     float64 `json:"total_gb"`
	AvailableGB float64 `json:"available_gb"`
	GPUsPerNode int64   `json:"gpus_per_node"`
	Nodes       int64   `json:"nodes"`
	// PeakTFLOPs is the dense 16-bit peak per GPU (0: unknown).
	PeakTFLOPs float64 `json:"peak_tflops"`
	PeakSource string  `json:"peak_source,omitempty"`
}

type goalJSON struct {
	DatasetTokens   float64 `json:"dataset_tokens"`
	Epochs          float64 `json:"epochs"`
	EffectiveBatch  int64   `json:"effective_batch"`
	SeqLen          int64   `json:"seq_len"`
	PricePerGPUHour float64 `json:"price_per_gpu_hour,omitempty"`
}

type linkJSON struct {
	Kind     string  `json:"kind"`
	GBPerSec float64 `json:"gb_per_s"`
	Source   string  `json:"source"`
}

type timeModelJSON struct {
	MFU       float64  `json:"mfu"`
	MFUSource string   `json:"mfu_source"`
	Validated bool     `json:"validated"`
	Intra     linkJSON `json:"intra_node"`
	Inter     linkJSON `json:"inter_node"`
	Host      linkJSON `json:"host"`
	Overlap   string   `json:"overlap"`
	Notes     []string `json:"notes"`
}

type searchJSON struct {
	Candidates int `json:"candidates"`
	Fits       int `json:"fits"`
}

type planTimeJSON struct {
	Known           bool    `json:"known"`
	Why             string  `json:"why,omitempty"`
	ComputeS        float64 `json:"compute_s"`
	RecomputeS      float64 `json:"recompute_s"`
	DequantS        float64 `json:"dequant_s"`
	CommunicationS  float64 `json:"communication_s"`
	CommExposedS    float64 `json:"communication_exposed_s"`
	OffloadS        float64 `json:"offload_s"`
	StepS           float64 `json:"step_s"`
	Updates         int64   `json:"updates"`
	TotalHours      float64 `json:"total_hours"`
	TokensPerSecond float64 `json:"tokens_per_s"`
	MFU             float64 `json:"mfu"`
}

type planJSON struct {
	Rank          int          `json:"rank"`
	Method        string       `json:"method"`
	Quant         string       `json:"quant,omitempty"`
	LoRARank      int64        `json:"lora_rank,omitempty"`
	Targets       []string     `json:"lora_targets,omitempty"`
	SeqLen        int64        `json:"seq_len"`
	MicroBatch    int64        `json:"micro_batch"`
	GradAccum     int64        `json:"grad_accum"`
	GradCkpt      string       `json:"grad_ckpt"`
	FusedCE       string       `json:"fused_ce"`
	Optimizer     string       `json:"optimizer"`
	Precision     string       `json:"precision"`
	Attn          string       `json:"attn"`
	Strategy      string       `json:"sharding"`
	Offload       string       `json:"cpu_offload"`
	Nodes         int64        `json:"nodes"`
	GPUsPerNode   int64        `json:"gpus_per_node"`
	WorldSize     int64        `json:"world_size"`
	TotalGB       float64      `json:"total_gb"`
	Ratio         float64      `json:"ratio"`
	Fit           string       `json:"fit"`
	HostOffloadGB float64      `json:"host_offload_gb,omitempty"`
	Time          planTimeJSON `json:"time"`
	Cost          float64      `json:"cost,omitempty"`
	Trades        []string     `json:"trades"`
	ChangesResult bool         `json:"changes_result"`
	// Command is the estimate command line of this plan.
	Command string `json:"command"`
	// RecipeRefused says why --emit cannot write this plan (a setting the
	// emitted stacks cannot reproduce); absent when it can.
	RecipeRefused string `json:"recipe_refused,omitempty"`
}

type chosenJSON struct {
	Components    []report.Component `json:"components"`
	TotalGB       float64            `json:"total_gb"`
	ProxyGB       float64            `json:"planning_proxy_gb"`
	Verdict       report.Verdict     `json:"verdict"`
	HostOffloadGB float64            `json:"host_offload_gb,omitempty"`
	Warnings      []string           `json:"warnings,omitempty"`
	Assumptions   []string           `json:"assumptions"`
	Confidence    report.Confidence  `json:"confidence"`
}

type noPlanJSON struct {
	Binding string    `json:"binding"`
	Nearest *planJSON `json:"nearest,omitempty"`
}

type maximumJSON struct {
	Quantity   string    `json:"quantity"`
	Value      int64     `json:"value"`
	Bound      int64     `json:"bound"`
	Candidates int       `json:"candidates"`
	Plan       *planJSON `json:"plan,omitempty"`
}

func (c *PlanCmd) gpuJSON(s *gpuSetup, perNode int64, hw plan.Hardware, req estimate.Request) planGPUJSON {
	avail := req.Available
	if avail == 0 {
		avail = req.GPUTotal
	}
	g := planGPUJSON{Name: s.Name, GPUsPerNode: perNode, Nodes: c.Nodes, PeakTFLOPs: hw.PeakTFLOPs,
		TotalGB: bytesize.RoundedGiB(req.GPUTotal, 3), AvailableGB: bytesize.RoundedGiB(avail, 3)}
	for _, k := range s.Cards() {
		if k.DenseTFLOPs16 != nil && *k.DenseTFLOPs16 == hw.PeakTFLOPs {
			g.PeakSource = k.TFLOPsSource
			break
		}
	}
	if c.PeakTFLOPs != nil {
		g.PeakSource = "--peak-tflops"
	}
	return g
}

func newTimeModelJSON(hw plan.Hardware) timeModelJSON {
	mfu, src := hw.MFU, hw.MFUSource
	if mfu <= 0 {
		mfu, src = plan.DefaultMFU, plan.MFUSource(plan.Datacenter)
	}
	lj := func(l plan.Link) linkJSON {
		return linkJSON{string(l.Kind), bytesize.Round(l.BytesPerSec/1e9, 3), l.Source}
	}
	return timeModelJSON{MFU: mfu, MFUSource: src, Validated: true, Intra: lj(hw.Intra), Inter: lj(hw.Inter), Host: lj(hw.Host),
		Overlap: "collectives overlap with compute (FSDP/ZeRO-3 prefetch, DDP bucketed all-reduce): only communication beyond the compute time is exposed; CPU-offload traffic is not overlapped",
		Notes: []string{
			"time is a model whose utilisation is fitted on a cohort of measured runs (torchtune, torchtitan, fsdp_qlora); validate --throughput reports its error there, with each source left out of the fit too; stacks outside the cohort (Hugging Face Trainer, TRL, axolotl) are not measured",
			"FLOPs per token from the model's shape: 6N for trained weights, 4N for frozen ones (no weight gradients), 12·a·d per layer for attention with a the keys attended (half the sequence under a causal mask with flash or SDPA kernels), one more forward of the layers under checkpointing",
			"QLoRA: the 4-bit base is dequantized to 16 bits before each matmul (forward, backward, recomputation): 2.5 bytes of memory traffic per weight each time at the card's datasheet bandwidth",
			"sequences are assumed packed to seq_len: padding, dataloading, evaluation and checkpoint saving are not in the time",
			"bandwidths are nominal; collectives reach less, so communication is a lower bound",
		}}
}

func newPlanJSON(rank int, p plan.Plan, trades []string, model string, lengths []string) planJSON {
	q := p.Request
	e := p.Estimate
	t := p.Time
	pj := planJSON{Rank: rank, Method: string(q.Method), Quant: string(q.Quant), SeqLen: q.SeqLen, MicroBatch: p.MicroBatch, GradAccum: p.GradAccum,
		GradCkpt: string(q.GradCkpt), FusedCE: string(q.FusedCE), Optimizer: string(q.Optimizer),
		Precision: string(q.Precision), Attn: string(q.Attn), Strategy: string(q.Sharding.Strategy), Offload: string(q.Sharding.CPUOffload),
		Nodes: p.Nodes, GPUsPerNode: p.GPUsPerNode, WorldSize: p.World,
		TotalGB: bytesize.RoundedGiB(e.Total, 3), Ratio: bytesize.Round(e.Verdict.Ratio, 4), Fit: string(e.Verdict.Fit), HostOffloadGB: bytesize.RoundedGiB(e.HostOffload, 3),
		Time: planTimeJSON{Known: t.Known, Why: t.Why, ComputeS: bytesize.Round(t.Compute, 4), RecomputeS: bytesize.Round(t.Recompute, 4), DequantS: bytesize.Round(t.Dequant, 4),
			CommunicationS: bytesize.Round(t.Communication, 4), CommExposedS: bytesize.Round(t.CommExposed, 4), OffloadS: bytesize.Round(t.Offload, 4), StepS: bytesize.Round(t.Step, 4),
			Updates: t.Updates, TotalHours: bytesize.Round(t.Total/3600, 3), TokensPerSecond: bytesize.Round(t.TokensPerSec, 0), MFU: bytesize.Round(t.MFU, 4)},
		Cost: bytesize.Round(p.Cost, 2), Trades: append([]string{}, trades...), ChangesResult: p.ChangesResult, Command: planCommand(model, p, lengths)}
	if q.Method != estimate.Full {
		pj.LoRARank, pj.Targets = q.LoRARank, q.LoRATargets
	}
	if err := recipe.Check(recipe.Input{ModelID: model, Plan: p}); err != nil {
		pj.RecipeRefused = err.Error()
	}
	return pj
}

// planCommand is the estimate command line that checks a plan's memory;
// lengths are the plan's own length flags (lengthArgs), which the search
// keeps unchanged.
func planCommand(model string, p plan.Plan, lengths []string) string {
	q := p.Request
	a := []string{"canifinetune estimate", model, "--method", string(q.Method)}
	if q.Method != estimate.Full {
		a = append(a, "--rank", fmt.Sprint(q.LoRARank), "--targets", strings.Join(q.LoRATargets, ","))
	}
	if q.Quant != "" && q.Quant != "nf4-dq" {
		a = append(a, "--quant", string(q.Quant))
	}
	a = append(a, "--seq-len", fmt.Sprint(q.SeqLen), "--batch", fmt.Sprint(p.MicroBatch), "--grad-accum", fmt.Sprint(p.GradAccum),
		"--grad-ckpt", string(q.GradCkpt), "--fused-ce", string(q.FusedCE), "--optimizer", string(q.Optimizer))
	a = append(a, lengths...)
	if q.Stack != "" {
		a = append(a, "--stack", string(q.Stack))
	}
	if st := q.Sharding.Strategy; st != "none" {
		a = append(a, "--strategy", string(st), "--num-gpus", fmt.Sprint(p.GPUsPerNode))
		if p.Nodes > 1 {
			a = append(a, "--nodes", fmt.Sprint(p.Nodes))
		}
		if q.Sharding.CPUOffload != "none" {
			a = append(a, "--offload", string(q.Sharding.CPUOffload))
		}
	}
	return strings.Join(a, " ")
}

// short is a plan in a few words for the table.
func (p planJSON) short() string {
	s := p.Method
	if p.LoRARank > 0 {
		s += fmt.Sprintf(" r%d", p.LoRARank)
	}
	s += fmt.Sprintf(", seq %d, batch %d×%d", p.SeqLen, p.MicroBatch, p.GradAccum)
	if p.GradCkpt != "none" {
		s += ", ckpt " + p.GradCkpt
	}
	if p.FusedCE != "none" {
		s += ", " + p.FusedCE
	}
	if strings.Contains(p.Optimizer, "8bit") {
		s += ", 8-bit opt"
	}
	switch {
	case p.WorldSize == 1:
		s += ", 1 GPU"
	case p.Nodes > 1:
		s += fmt.Sprintf(", %s × %d nodes × %d", p.Strategy, p.Nodes, p.GPUsPerNode)
	default:
		s += fmt.Sprintf(", %s × %d", p.Strategy, p.WorldSize)
	}
	if p.Offload != "none" {
		s += " +offload " + p.Offload
	}
	return s
}

func hoursWords(h float64) string {
	switch {
	case h < 1:
		return fmt.Sprintf("%.0f min", h*60)
	case h < 48:
		return fmt.Sprintf("%.1f h", h)
	}
	return fmt.Sprintf("%.1f d", h/24)
}

func printPlans(w io.Writer, o PlanJSON, top int) {
	printPlanHeader(w, o)
	fmt.Fprintf(w, "searched %d configurations; %d fit (verdict yes)\n\n", o.Search.Candidates, o.Search.Fits)
	if o.NoPlan != nil {
		fmt.Fprintf(w, "no plan fits: %s\n", o.NoPlan.Binding)
		if n := o.NoPlan.Nearest; n != nil {
			fmt.Fprintf(w, "nearest: %s — %.2f GiB per GPU, ratio %.2f\n  check it: %s\n", n.short(), n.TotalGB, n.Ratio, n.Command)
		}
		return
	}
	// The table shows the best of each kind of plan: variants that differ
	// only in micro-batch, loss kernel or optimizer (the same time, other
	// memory) are counted, not listed; --json has every one.
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tplan\tGiB/GPU\tratio\ttokens/s\ttime\tcost\ttrades")
	kind := func(p planJSON) string {
		return fmt.Sprint(p.Method, p.LoRARank, p.SeqLen, p.GradCkpt, p.Strategy, p.Offload, p.WorldSize, p.Nodes)
	}
	seen := map[string]bool{}
	shown, hidden := 0, 0
	for _, p := range o.Plans {
		if seen[kind(p)] || shown == top {
			hidden++
			continue
		}
		seen[kind(p)] = true
		shown++
		tps, tm, cost := "?", "unknown", "—"
		if p.Time.Known {
			tps, tm = groupDigits(int64(p.Time.TokensPerSecond)), hoursWords(p.Time.TotalHours)
		}
		if p.Cost > 0 {
			cost = fmt.Sprintf("%.0f", p.Cost)
		}
		fmt.Fprintf(tw, "%d\t%s\t%.2f\t%.2f\t%s\t%s\t%s\t%s\n", p.Rank, p.short(), p.TotalGB, p.Ratio, tps, tm, cost, strings.Join(p.Trades, "; "))
	}
	tw.Flush()
	fmt.Fprintln(w, "batch m×a: micro-batches of m sequences per GPU, a of them accumulated per optimizer update")
	if hidden > 0 {
		fmt.Fprintf(w, "… and %d more: variants of these (micro-batch, loss kernel, optimizer) and lower-ranked plans (--json lists them all)\n", hidden)
	}
	best := o.Plans[0]
	fmt.Fprintf(w, "\nchosen: %s\n  check it: %s\n", best.short(), best.Command)
	if ch := o.Chosen; ch != nil {
		var parts []string
		for _, c := range ch.Components {
			if c.GB >= 0.005 {
				parts = append(parts, fmt.Sprintf("%s %.2f", c.Name, c.GB))
			}
		}
		fmt.Fprintf(w, "  memory per GPU (GiB): %s; total %.2f of %.2f budget (ratio %.2f, %s)\n", strings.Join(parts, ", "), ch.TotalGB, ch.Verdict.BudgetGB, ch.Verdict.Ratio, ch.Verdict.Fit)
		if ch.HostOffloadGB > 0 {
			fmt.Fprintf(w, "  host RAM for CPU offload: %.2f GiB per GPU process\n", ch.HostOffloadGB)
		}
		fmt.Fprintf(w, "  confidence: %s — %s\n", ch.Confidence.Grade, ch.Confidence.Reason)
	}
	printTimeSplit(w, best)
	printTimeModel(w, o)
}

func printPlanHeader(w io.Writer, o PlanJSON) {
	fmt.Fprintf(w, "%s (%s, %.2fB params; estimator %s %s)\n", o.Model.Name, o.Model.ModelType, float64(o.Model.Params)/1e9, o.Estimator.Name, o.Estimator.Version)
	g := o.GPU
	peak := "dense 16-bit peak unknown"
	if g.PeakTFLOPs > 0 {
		peak = fmt.Sprintf("%g dense 16-bit TFLOPS", g.PeakTFLOPs)
	}
	name := g.Name
	if name == "" {
		name = "GPU"
	}
	if g.Nodes > 1 {
		fmt.Fprintf(w, "GPUs: up to %d nodes × %d %s (%s); links: %s in a node", g.Nodes, g.GPUsPerNode, name, peak, o.TimeModel.Intra.Kind)
	} else if g.GPUsPerNode > 1 {
		fmt.Fprintf(w, "GPUs: up to %d × %s (%s); links: %s", g.GPUsPerNode, name, peak, o.TimeModel.Intra.Kind)
	} else {
		fmt.Fprintf(w, "GPU: %s (%s)", name, peak)
	}
	if g.Nodes > 1 {
		fmt.Fprintf(w, ", %s between nodes", o.TimeModel.Inter.Kind)
	}
	fmt.Fprintln(w)
	for _, n := range o.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if o.Maximum == nil {
		gl := o.Goal
		epochs := "epochs"
		if gl.Epochs == 1 {
			epochs = "epoch"
		}
		fmt.Fprintf(w, "goal: %s tokens × %g %s, %d sequences of up to %d tokens per optimizer update\n", countWords(gl.DatasetTokens), gl.Epochs, epochs, gl.EffectiveBatch, gl.SeqLen)
	}
}

func printTimeSplit(w io.Writer, p planJSON) {
	t := p.Time
	if !t.Known {
		fmt.Fprintf(w, "\nwhere the time goes: unknown — %s\n", t.Why)
		return
	}
	pct := func(x float64) float64 {
		if t.StepS <= 0 {
			return 0
		}
		return 100 * x / t.StepS
	}
	fmt.Fprintf(w, "\nwhere the time goes (one optimizer update, %.3f s; %d updates, %s):\n", t.StepS, t.Updates, hoursWords(t.TotalHours))
	parts := []string{fmt.Sprintf("compute %.3f s (%.0f %%)", t.ComputeS, pct(t.ComputeS))}
	if t.RecomputeS > 0 {
		parts = append(parts, fmt.Sprintf("recompute %.3f s (%.0f %%)", t.RecomputeS, pct(t.RecomputeS)))
	}
	if t.DequantS > 0 {
		parts = append(parts, fmt.Sprintf("4-bit dequantization %.3f s (%.0f %%)", t.DequantS, pct(t.DequantS)))
	}
	switch {
	case t.CommExposedS > 0:
		parts = append(parts, fmt.Sprintf("communication %.3f s, %.3f s of it not hidden by compute (%.0f %%)", t.CommunicationS, t.CommExposedS, pct(t.CommExposedS)))
	case t.CommunicationS > 0:
		parts = append(parts, fmt.Sprintf("communication %.3f s, hidden behind compute", t.CommunicationS))
	}
	if t.OffloadS > 0 {
		parts = append(parts, fmt.Sprintf("host-link traffic (CPU offload, paged states) %.3f s (%.0f %%)", t.OffloadS, pct(t.OffloadS)))
	}
	fmt.Fprintf(w, "  %s\n", strings.Join(parts, "; "))
}

func printTimeModel(w io.Writer, o PlanJSON) {
	tm := o.TimeModel
	fmt.Fprintf(w, "\ntime model (not a measurement): MFU %.2f — %s\n", tm.MFU, tm.MFUSource)
	for _, n := range tm.Notes {
		fmt.Fprintf(w, "  - %s\n", n)
	}
}

// countWords writes a large count with a suffix: 1e8 → "100M".
func countWords(n float64) string {
	for _, u := range []struct {
		div    float64
		suffix string
	}{{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "k"}} {
		if n >= u.div {
			return strconv.FormatFloat(n/u.div, 'g', 4, 64) + u.suffix
		}
	}
	return strconv.FormatFloat(n, 'g', 4, 64)
}

func printMaximum(w io.Writer, o PlanJSON) {
	printPlanHeader(w, o)
	m := o.Maximum
	fmt.Fprintf(w, "bisection on the estimator: %d estimates\n\n", m.Candidates)
	if m.Plan == nil {
		fmt.Fprintf(w, "no %s fits: even 1 does not, with the request's settings on these GPUs\n", m.Quantity)
		return
	}
	p := m.Plan
	fmt.Fprintf(w, "largest %s that fits: %d (%s; %.2f GiB per GPU, ratio %.2f)\n", m.Quantity, m.Value, p.short(), p.TotalGB, p.Ratio)
	if m.Value < m.Bound {
		fmt.Fprintf(w, "  %d does not fit (verdict marginal or no)\n", m.Value+1)
	} else {
		fmt.Fprintf(w, "  that is the largest value searched\n")
	}
	if p.Time.Known {
		gpus := "1 GPU"
		if p.WorldSize > 1 {
			gpus = fmt.Sprintf("%d GPUs", p.WorldSize)
		}
		fmt.Fprintf(w, "  modelled speed: %s tokens/s on %s (%.2f s per optimizer update)\n", groupDigits(int64(p.Time.TokensPerSecond)), gpus, p.Time.StepS)
	}
	fmt.Fprintf(w, "  check it: %s\n", p.Command)
}
