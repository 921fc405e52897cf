package evidence

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/canifinetune/canifinetune/catalog"
	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/gpu"
	"github.com/canifinetune/canifinetune/hfconfig"
	"github.com/canifinetune/canifinetune/plan"
)

// ThroughputResult is the time model's answer for one speed case.
type ThroughputResult struct {
	ID        string `json:"id"`
	Framework string `json:"framework"`
	Method    string `json:"method"`
	Trust     string `json:"trust"`
	// GPU is the table card whose peak was used ("" when none).
	GPU   string `json:"gpu"`
	World int64  `json:"world"`
	// Measured and Predicted are tokens per second of all GPUs together;
	// Predicted is 0 when the case could not be scored.
	Measured  float64 `json:"measured_tokens_per_sec"`
	Predicted float64 `json:"predicted_tokens_per_sec"`
	// Error is (predicted − measured) / measured.
	Error float64 `json:"error"`
	// ImpliedMFU is the model-FLOPs utilisation (as --mfu takes it) at
	// which the time model reproduces the measurement; 0 when no
	// utilisation up to 1.5 does.
	ImpliedMFU float64 `json:"implied_mfu"`
	// Unsupported says why the case was not scored ("" when it was).
	Unsupported string `json:"unsupported,omitempty"`
	// Assumed lists what the case leaves open and the scoring filled in.
	Assumed []string `json:"assumed,omitempty"`
	// Source is the document the row comes from (its source field up to
	// the first comma); Class the GPU class whose utilisation was used.
	Source string `json:"source"`
	Class  string `json:"gpu_class,omitempty"`

	// redo predicts the case again at another utilisation (nil when the
	// case was not scored).
	redo func(mfu float64) float64
}

// ThroughputSummary is the error of a group of scored speed cases.
type ThroughputSummary struct {
	N            int     `json:"n"`
	MedianAbs    float64 `json:"median_abs_error"`
	P90Abs       float64 `json:"p90_abs_error"`
	MedianSigned float64 `json:"median_signed_error"`
	// FittedMFU is the median implied utilisation of the group's cases:
	// the MFU that would centre the group's errors on zero.
	FittedMFU float64 `json:"fitted_mfu"`
}

// ThroughputReport is the time model scored against a speed cohort.
type ThroughputReport struct {
	// MFU is the utilisation the predictions used (plan.DefaultMFU).
	MFU     float64            `json:"mfu"`
	Results []ThroughputResult `json:"cases"`
	Overall ThroughputSummary  `json:"overall"`
	// ByFramework, ByGPU and ByStackGPU group the scored cases by framework,
	// by table card, and by "framework on card".
	ByFramework map[string]ThroughputSummary `json:"by_framework"`
	ByGPU       map[string]ThroughputSummary `json:"by_gpu"`
	ByStackGPU  map[string]ThroughputSummary `json:"by_stack_gpu"`
	// ByMethod and BySource group them by method and by source document.
	ByMethod map[string]ThroughputSummary `json:"by_method"`
	BySource map[string]ThroughputSummary `json:"by_source"`
	// MFUByClass is the utilisation per GPU class the predictions used
	// (plan.ClassMFU).
	MFUByClass map[string]float64 `json:"mfu_by_class"`
	// LeaveOneSourceOut scores every row with the class utilisation fitted
	// (as plan.ClassMFU is: the median implied MFU of the class's rows)
	// on the other sources' rows only: how the fit does on a source it has
	// not seen. A class no other source measures falls back to the median
	// of all the other sources' rows.
	LeaveOneSourceOut ThroughputSummary `json:"leave_one_source_out"`
	Unsupported       int               `json:"unsupported"`
}

// ScoreThroughput predicts every case's tokens per second with package
// plan's time model at its default utilisation and compares them with the
// measurements. est supplies the trainable parameters that data-parallel
// communication moves.
func ScoreThroughput(cases []ThroughputCase, est estimate.Estimator) ThroughputReport {
	rep := ThroughputReport{MFU: plan.DefaultMFU, MFUByClass: map[string]float64{}}
	for c, m := range plan.ClassMFU {
		rep.MFUByClass[string(c)] = m
	}
	for _, c := range cases {
		rep.Results = append(rep.Results, PredictThroughput(est, c))
	}
	var scored []ThroughputResult
	for _, r := range rep.Results {
		if r.Unsupported != "" {
			rep.Unsupported++
			continue
		}
		scored = append(scored, r)
	}
	rep.Overall = summarizeThroughput(scored)
	rep.ByFramework = groupThroughput(scored, func(r ThroughputResult) string { return r.Framework })
	rep.ByGPU = groupThroughput(scored, func(r ThroughputResult) string { return r.GPU })
	rep.ByStackGPU = groupThroughput(scored, func(r ThroughputResult) string { return r.Framework + " on " + r.GPU })
	rep.ByMethod = groupThroughput(scored, func(r ThroughputResult) string { return r.Method })
	rep.BySource = groupThroughput(scored, func(r ThroughputResult) string { return r.Source })
	rep.LeaveOneSourceOut = summarizeThroughput(leaveOneSourceOut(scored))
	return rep
}

// ClassMFUFit is the median implied utilisation of the rows on each GPU
// class, rows for which keep holds: the fit plan.ClassMFU holds.
func ClassMFUFit(rs []ThroughputResult, keep func(ThroughputResult) bool) map[string]float64 {
	by := map[string][]float64{}
	for _, r := range rs {
		if r.Unsupported == "" && r.ImpliedMFU > 0 && keep(r) {
			by[r.Class] = append(by[r.Class], r.ImpliedMFU)
			by[""] = append(by[""], r.ImpliedMFU)
		}
	}
	out := map[string]float64{}
	for k, v := range by {
		out[k] = Quantile(v, 0.5)
	}
	return out
}

// leaveOneSourceOut predicts each row at the class utilisation fitted on
// the other sources' rows.
func leaveOneSourceOut(scored []ThroughputResult) []ThroughputResult {
	fits := map[string]map[string]float64{}
	out := make([]ThroughputResult, 0, len(scored))
	for _, r := range scored {
		fit, ok := fits[r.Source]
		if !ok {
			fit = ClassMFUFit(scored, func(o ThroughputResult) bool { return o.Source != r.Source })
			fits[r.Source] = fit
		}
		m, ok := fit[r.Class]
		if !ok {
			m = fit[""]
		}
		if r.redo == nil || m <= 0 {
			continue
		}
		r.Predicted = r.redo(m)
		r.Error = (r.Predicted - r.Measured) / r.Measured
		out = append(out, r)
	}
	return out
}

// PredictThroughput scores one speed case.
func PredictThroughput(est estimate.Estimator, c ThroughputCase) ThroughputResult {
	src, _, _ := strings.Cut(c.Source, ",")
	res := ThroughputResult{ID: c.ID, Framework: c.Framework, Method: c.Method, Trust: c.Trust, Source: strings.TrimSpace(src)}
	if c.Measured.TokensPerSec != nil {
		res.Measured = *c.Measured.TokensPerSec
	}
	fail := func(why string) ThroughputResult { res.Unsupported = why; return res }
	ent, err := catalog.Lookup(c.Model)
	if err != nil {
		return fail(fmt.Sprintf("model %s is not in the catalog", c.Model))
	}
	m, err := hfconfig.Parse(ent.Config)
	if err != nil {
		return fail(err.Error())
	}
	card, assumedCard, why := throughputCard(c.GPU)
	if why != "" {
		return fail(why)
	}
	res.GPU = card.Name
	res.Class = string(plan.ClassOf(card.Name))
	res.Assumed = append(res.Assumed, assumedCard...)
	mc, assumed := c.memoryCase()
	res.Assumed = append(res.Assumed, assumed...)
	req, more, why := RequestForModel(m, mc)
	res.Assumed = append(res.Assumed, more...)
	if why != "" {
		return fail(why)
	}
	req, err = req.Normalize()
	if err != nil {
		return fail(err.Error())
	}
	e, err := est.Estimate(req)
	if err != nil {
		return fail(err.Error())
	}
	world := int64(1)
	if c.GPU.Count != nil {
		world = int64(*c.GPU.Count)
	}
	nodes := int64(1)
	switch {
	case c.GPU.Nodes != nil:
		nodes = int64(*c.GPU.Nodes)
	case world > 8:
		nodes = (world + 7) / 8
		res.Assumed = append(res.Assumed, fmt.Sprintf("gpu.nodes (%d: 8 GPUs a node)", nodes))
	}
	res.World = world
	hw, _, err := plan.HardwareFor([]*gpu.Card{&card}, max(world/nodes, 1), nodes, plan.HardwareChoice{})
	if err != nil {
		return fail(err.Error())
	}
	lay := plan.Layout{World: world, Nodes: nodes, MicroBatch: req.Batch, GradAccum: req.GradAccum}
	tp, err := plan.PredictThroughput(hw, req, e.TrainableParams, lay)
	if err != nil {
		return fail(err.Error())
	}
	if !tp.Time.Known {
		return fail(tp.Time.Why)
	}
	res.Predicted = tp.TokensPerSec
	res.Error = (res.Predicted - res.Measured) / res.Measured
	res.ImpliedMFU = impliedMFU(hw, req, e.TrainableParams, lay, res.Measured)
	res.redo = func(mfu float64) float64 {
		h := hw
		h.MFU = mfu
		tp, err := plan.PredictThroughput(h, req, e.TrainableParams, lay)
		if err != nil {
			return 0
		}
		return tp.TokensPerSec
	}
	return res
}

// impliedMFU bisects the utilisation at which the model's tokens per second
// equal measured; throughput rises with the utilisation, so the bisection
// is exact to its tolerance. 0 when even 1.5 falls short.
func impliedMFU(hw plan.Hardware, r estimate.Request, trainable int64, l plan.Layout, measured float64) float64 {
	at := func(mfu float64) float64 {
		hw.MFU = mfu
		tp, err := plan.PredictThroughput(hw, r, trainable, l)
		if err != nil {
			return 0
		}
		return tp.TokensPerSec
	}
	lo, hi := 1e-4, 1.5
	if at(hi) < measured {
		return 0
	}
	for range 60 {
		mid := (lo + hi) / 2
		if at(mid) < measured {
			lo = mid
		} else {
			hi = mid
		}
	}
	return round3((lo + hi) / 2)
}

// throughputCard finds the table card of a case. A family name the table
// holds several cards under ("a100") is accepted when every card it could
// mean has the same architecture and dense 16-bit peak, the two things the
// time model reads; the first is used and the assumption named.
func throughputCard(g ThroughputGPU) (gpu.Card, []string, string) {
	if g.Name == nil {
		return gpu.Card{}, nil, "gpu.name unknown"
	}
	card, err := gpu.Lookup(*g.Name)
	if err == nil {
		return card, nil, ""
	}
	var le *gpu.LookupError
	if errors.As(err, &le) && le.Ambiguous && len(le.Candidates) > 0 {
		first := le.Candidates[0]
		for _, k := range le.Candidates[1:] {
			if k.Arch != first.Arch || !samePeak(k.DenseTFLOPs16, first.DenseTFLOPs16) {
				return gpu.Card{}, nil, err.Error()
			}
		}
		return first, []string{fmt.Sprintf("gpu %q taken as %s (its variants share the peak)", *g.Name, first.Name)}, ""
	}
	return gpu.Card{}, nil, err.Error()
}

func samePeak(a, b *float64) bool {
	return a != nil && b != nil && *a == *b
}

// memoryCase is the case's configuration in the memory schema, so that one
// mapping (RequestForModel) turns both kinds of row into a request. Kernels
// are dropped (they change memory, not the FLOPs the time model counts);
// selective checkpointing becomes none; open LoRA fields get PEFT-like
// defaults. The strings name what was filled in.
func (c ThroughputCase) memoryCase() (Case, []string) {
	var assumed []string
	gib := 1.0
	mc := Case{
		ID: c.ID, Source: c.Source, Trust: c.Trust, Model: c.Model, Method: c.Method,
		Precision: c.Precision, Quant: c.Quant, SeqLen: c.SeqLen, SeqLenKind: c.SeqLenKind,
		Batch: c.Batch, GradAccum: c.GradAccum, GradCkpt: c.GradCkpt, Optimizer: c.Optimizer,
		Attn: c.Attn, Framework: c.Framework, Sharding: c.Sharding,
		GPU:      GPU{Name: c.GPU.Name, Count: c.GPU.Count, VRAMGiB: c.GPU.VRAMGiB},
		Measured: Measured{Kind: KindAllocated, GiB: &gib},
	}
	if mc.SeqLenKind == "padded-to-longest" || mc.SeqLenKind == "max" {
		mc.SeqLenKind = "fixed" // speed is scored at the stated length
		assumed = append(assumed, "seq_len (every sequence at the stated length)")
	}
	if c.GradCkpt != nil && *c.GradCkpt == "selective" {
		none := "none"
		mc.GradCkpt = &none
		assumed = append(assumed, "grad_ckpt (selective recompute scored as none: a lower bound on the time)")
	}
	if l := c.LoRA; l != nil {
		mc.LoRA = &LoRA{Rank: 16, Targets: l.Targets}
		if l.Rank != nil {
			mc.LoRA.Rank = *l.Rank
		} else {
			assumed = append(assumed, "lora.rank (16)")
		}
		if len(l.Targets) == 0 {
			mc.LoRA.Targets = []string{"all-linear"}
			assumed = append(assumed, "lora.targets (all-linear)")
		}
	}
	if mc.Sharding.Strategy == "" {
		mc.Sharding.Strategy = "none"
	}
	return mc, assumed
}

func summarizeThroughput(rs []ThroughputResult) ThroughputSummary {
	s := ThroughputSummary{N: len(rs)}
	if len(rs) == 0 {
		return s
	}
	var abs, signed, mfu []float64
	for _, r := range rs {
		abs = append(abs, math.Abs(r.Error))
		signed = append(signed, r.Error)
		if r.ImpliedMFU > 0 {
			mfu = append(mfu, r.ImpliedMFU)
		}
	}
	s.MedianAbs = round3(Quantile(abs, 0.5))
	s.P90Abs = round3(Quantile(abs, 0.9))
	s.MedianSigned = round3(Quantile(signed, 0.5))
	if len(mfu) > 0 {
		s.FittedMFU = round3(Quantile(mfu, 0.5))
	}
	return s
}

func groupThroughput(rs []ThroughputResult, key func(ThroughputResult) string) map[string]ThroughputSummary {
	by := map[string][]ThroughputResult{}
	for _, r := range rs {
		by[key(r)] = append(by[key(r)], r)
	}
	out := make(map[string]ThroughputSummary, len(by))
	for k, v := range by {
		out[k] = summarizeThroughput(v)
	}
	return out
}

// GroupNames lists the keys of a grouped summary, largest group first.
func GroupNames(m map[string]ThroughputSummary) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if m[names[i]].N != m[names[j]].N {
			return m[names[i]].N > m[names[j]].N
		}
		return names[i] < names[j]
	})
	return names
}
