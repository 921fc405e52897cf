package report

import (
	"fmt"
	"strings"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/gpu"
	"github.com/canifinetune/canifinetune/internal/bytesize"
	"github.com/canifinetune/canifinetune/modelsource"
	"github.com/canifinetune/canifinetune/placement"
)

// Estimate is the stable --json schema of estimate (schema_version 1).
type Estimate struct {
	SchemaVersion int         `json:"schema_version"`
	Estimator     Estimator   `json:"estimator"`
	Model         Model       `json:"model"`
	Config        Config      `json:"config"`
	GPU           *GPU        `json:"gpu,omitempty"`
	Components    []Component `json:"components"`
	TotalBytes    int64       `json:"total_bytes"`
	TotalGB       float64     `json:"total_gb"`
	ProxyBytes    int64       `json:"planning_proxy_bytes"`
	ProxyGB       float64     `json:"planning_proxy_gb"`
	Levels        Levels      `json:"levels"`
	Phases        *Phases     `json:"phases,omitempty"`
	Verdict       Verdict     `json:"verdict"`
	HostOffloadGB float64     `json:"host_offload_gb,omitempty"`
	// PagedOptimizerGB is a paged optimizer's states in CUDA unified
	// memory, per GPU: in levels.process, not in the allocator's levels
	// or the total.
	PagedOptimizerGB float64       `json:"paged_optimizer_gb,omitempty"`
	PerGPU           bool          `json:"per_gpu"`
	Detection        *Detection    `json:"detection,omitempty"`
	Placement        *Placement    `json:"placement,omitempty"`
	DataParallel     *DataParallel `json:"data_parallel,omitempty"`
	Notes            []string      `json:"notes,omitempty"`
	Warnings         []string      `json:"warnings,omitempty"`
	Assumptions      []string      `json:"assumptions"`
	Confidence       Confidence    `json:"confidence"`
	Changes          []Change      `json:"changes_that_fit"`
	// Simulation is the fake-tensor oracle's figures beside the estimate's,
	// with estimate --simulate.
	Simulation *Simulation `json:"simulation,omitempty"`
}

// Estimator names the estimator and its version.
type Estimator struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Model is the model estimated and where it came from.
type Model struct {
	Name         string `json:"name"`
	ID           string `json:"id"`
	From         string `json:"from"`
	CatalogEntry string `json:"catalog_entry,omitempty"`
	Source       string `json:"source"`
	Revision     string `json:"revision,omitempty"`
	Commit       string `json:"commit,omitempty"`
	ModelType    string `json:"model_type"`
	Params       int64  `json:"params"`
	// ParamsSource is "safetensors" when Params is the exact count from the
	// checkpoint's headers, "config" when config.json's shapes imply it.
	ParamsSource string `json:"params_source"`
	// ConfigParams is the config-derived count, for comparison.
	ConfigParams    int64    `json:"config_params"`
	Shards          int      `json:"safetensors_shards,omitempty"`
	TrainableParams int64    `json:"trainable_params"`
	Notes           []string `json:"notes,omitempty"`
}

// Config is the training configuration, normalised (every default filled).
type Config struct {
	Method    string         `json:"method"`
	Precision string         `json:"precision"`
	Quant     estimate.Quant `json:"quant,omitempty"`
	Rank      int64          `json:"lora_rank,omitempty"`
	Targets   []string       `json:"lora_targets,omitempty"`
	SeqLen    int64          `json:"seq_len"`
	// TargetLen is an encoder-decoder model's decoder length (0 otherwise).
	TargetLen int64 `json:"target_len,omitempty"`
	Batch     int64 `json:"batch"`
	GradAccum int64 `json:"grad_accum"`
	Dynamic   bool  `json:"dynamic_padding"`
	SeqLenP50 int64 `json:"seq_len_p50,omitempty"`
	// LengthsFrom says where the length distribution came from:
	// "dataset NAME" (a histogram the binary keeps), "file PATH", or
	// "median" (--seq-len-p50); empty without one.
	LengthsFrom string `json:"lengths_from,omitempty"`
	// SeqLenBound is the --seq-len asked for when the distribution's
	// longest sample is shorter, so that the longest batch (SeqLen) is
	// below it; 0 otherwise.
	SeqLenBound int64 `json:"seq_len_bound,omitempty"`
	// LongestFirst: the first micro-batch is the longest (--longest-first).
	LongestFirst bool                   `json:"longest_first,omitempty"`
	Dropout      float64                `json:"lora_dropout"`
	GradCkpt     estimate.Checkpointing `json:"grad_ckpt"`
	Optimizer    estimate.Optimizer     `json:"optimizer"`
	Attn         estimate.Attention     `json:"attn"`
	FusedCE      estimate.LossKernel    `json:"fused_ce"`
	Kernels      []estimate.Kernel      `json:"kernels,omitempty"`
	Compile      bool                   `json:"compile,omitempty"`
	EagerLoss    bool                   `json:"eager_loss,omitempty"`
	FreesLogits  bool                   `json:"frees_logits,omitempty"`
	OptInBwd     bool                   `json:"optimizer_in_backward,omitempty"`
	Task         estimate.Task          `json:"task"`
	Stack        estimate.StackName     `json:"stack,omitempty"`
	Strategy     estimate.Strategy      `json:"sharding"`
	NumGPUs      int64                  `json:"num_gpus"`
	Offload      estimate.Offload       `json:"cpu_offload"`
}

// GPU is the card the verdict is measured against.
type GPU struct {
	Name           string  `json:"name,omitempty"`
	TotalBytes     int64   `json:"total_bytes"`
	TotalGB        float64 `json:"total_gb"`
	AvailableBytes int64   `json:"available_bytes"`
	AvailableGB    float64 `json:"available_gb"`
	// Detected: the card is a detected device (Index); BudgetSource says
	// where the budget came from; Count is the GPUs --gpus names.
	Detected     bool   `json:"detected"`
	Index        *int   `json:"index,omitempty"`
	BudgetSource string `json:"budget_source,omitempty"`
	Count        int    `json:"count,omitempty"`
}

// Component is one term of the footprint with its share of the total and
// the source of its formula.
type Component struct {
	Name   string  `json:"name"`
	Bytes  int64   `json:"bytes"`
	GB     float64 `json:"gb"`
	Share  float64 `json:"share"`
	Source string  `json:"source"`
}

// Levels are the predicted peaks each kind of measurement shows.
type Levels struct {
	AllocatedBytes int64   `json:"allocated_bytes"`
	AllocatedGB    float64 `json:"allocated_gb"`
	ReservedBytes  int64   `json:"reserved_bytes"`
	ReservedGB     float64 `json:"reserved_gb"`
	ProcessBytes   int64   `json:"process_bytes"`
	ProcessGB      float64 `json:"process_gb"`
}

// Phases are the step's two transient peaks on top of the resident state,
// per GPU (the default estimator; absent for estimators that sum every term).
type Phases struct {
	ForwardBytes int64   `json:"forward_bytes"`
	ForwardGB    float64 `json:"forward_gb"`
	StepBytes    int64   `json:"step_bytes"`
	StepGB       float64 `json:"step_gb"`
}

// Verdict is the fit against the budget.
type Verdict struct {
	Fit          string  `json:"fit"`
	Ratio        float64 `json:"ratio,omitempty"`
	BudgetBytes  int64   `json:"budget_bytes,omitempty"`
	BudgetGB     float64 `json:"budget_gb,omitempty"`
	BudgetSource string  `json:"budget_source,omitempty"`
}

// Confidence is the evidence grade and its reason.
type Confidence struct {
	Grade  string `json:"grade"`
	Reason string `json:"reason"`
}

// Change is one change that makes the run fit, with its cost.
type Change struct {
	Change  string  `json:"change"`
	TotalGB float64 `json:"total_gb"`
	Ratio   float64 `json:"ratio"`
	SavesGB float64 `json:"saves_gb"`
	// Levers are the kinds of change (estimate.Lever values).
	Levers []string `json:"levers"`
	// ExtraCompute is the added compute per step as a fraction; OffloadGB the
	// host traffic per step and GPU; ChangesResult a different trained result.
	ExtraCompute  float64  `json:"extra_compute"`
	OffloadGB     float64  `json:"offload_gb_per_step"`
	ChangesResult bool     `json:"changes_result"`
	CostNotes     []string `json:"cost_notes"`
}

// NoteLengths records where the request's length distribution came from
// (Config.LengthsFrom: "dataset NAME", "file PATH" or "median"; "" for
// none) and, when the distribution's longest sample moved the longest batch
// below the asked-for bound, that bound (Config.SeqLenBound).
func (e *Estimate) NoteLengths(from string, bound int64) {
	e.Config.LengthsFrom = from
	if from != "" && e.Config.SeqLen < bound {
		e.Config.SeqLenBound = bound
	}
}

// NewEstimate builds the document of one estimate: the resolved model, the
// table card (nil for none), the request, the estimate, its explanation and
// the changes that make it fit. What the GPU setup decided the caller adds
// with Annotate.
func NewEstimate(rm *modelsource.Resolved, card *gpu.Card, req estimate.Request, e *estimate.Estimate, x estimate.Explanation, changes []estimate.Change) Estimate {
	n, _ := req.Normalize()
	out := Estimate{
		SchemaVersion: 1,
		Estimator:     Estimator{e.Estimator, e.Version},
		Model: Model{Name: rm.Name, ID: rm.ID, From: string(rm.From), CatalogEntry: rm.Entry, Source: rm.Source,
			Revision: rm.Revision, Commit: rm.Commit, ModelType: rm.Model.ModelType, Params: e.Params,
			ParamsSource: rm.ParamsSource(), ConfigParams: rm.ConfigParams, Shards: rm.Shards,
			TrainableParams: e.TrainableParams, Notes: rm.Notes},
		Config: Config{Method: string(n.Method), Precision: string(n.Precision), Quant: n.Quant, SeqLen: n.SeqLen, TargetLen: targetLenOf(n), Batch: n.Batch,
			GradAccum: max(1, n.GradAccum), Dynamic: n.DynamicShapes, SeqLenP50: seqLenP50(n), LongestFirst: n.LongestFirst, Dropout: dropoutOf(n),
			GradCkpt: n.GradCkpt, Optimizer: n.Optimizer, Attn: n.Attn, FusedCE: n.FusedCE, Stack: n.Stack,
			Kernels: n.Kernels, Compile: n.Compile, EagerLoss: n.EagerLoss, FreesLogits: n.FreesLogits, OptInBwd: n.OptimizerInBackward, Task: n.Task,
			Strategy: n.Sharding.Strategy, NumGPUs: n.Sharding.GPUs, Offload: n.Sharding.CPUOffload},
		TotalBytes: e.Total, TotalGB: bytesize.Round(bytesize.InGiB(e.Total), 3),
		ProxyBytes: e.PlanningProxy, ProxyGB: bytesize.Round(bytesize.InGiB(e.PlanningProxy), 3),
		Levels: Levels{e.Levels.Allocated, bytesize.Round(bytesize.InGiB(e.Levels.Allocated), 3), e.Levels.Reserved, bytesize.Round(bytesize.InGiB(e.Levels.Reserved), 3),
			e.Levels.Process, bytesize.Round(bytesize.InGiB(e.Levels.Process), 3)},
		Verdict:          Verdict{Fit: string(e.Verdict.Fit), Ratio: bytesize.Round(e.Verdict.Ratio, 4), BudgetBytes: e.Verdict.Budget, BudgetGB: bytesize.Round(bytesize.InGiB(e.Verdict.Budget), 3), BudgetSource: e.Verdict.BudgetSource},
		HostOffloadGB:    bytesize.Round(bytesize.InGiB(e.HostOffload), 3),
		PagedOptimizerGB: bytesize.Round(bytesize.InGiB(e.PagedOptimizer), 3),
		PerGPU:           e.PerGPU,
		Assumptions:      x.Assumptions,
		Warnings:         e.Warnings,
		Confidence:       Confidence{string(x.Confidence.Grade), x.Confidence.Reason},
		Changes:          []Change{},
	}
	if n.Method != estimate.Full {
		out.Config.Rank, out.Config.Targets = n.LoRARank, n.LoRATargets
	}
	if ph := e.Phases; ph.Forward > 0 || ph.Step > 0 {
		out.Phases = &Phases{ph.Forward, bytesize.Round(bytesize.InGiB(ph.Forward), 3), ph.Step, bytesize.Round(bytesize.InGiB(ph.Step), 3)}
	}
	if req.GPUTotal > 0 {
		g := &GPU{TotalBytes: req.GPUTotal, TotalGB: bytesize.Round(bytesize.InGiB(req.GPUTotal), 3), AvailableBytes: req.GPUTotal}
		if card != nil {
			g.Name = card.Name
		}
		if req.Available > 0 {
			g.AvailableBytes = req.Available
		}
		g.AvailableGB = bytesize.Round(bytesize.InGiB(g.AvailableBytes), 3)
		out.GPU = g
	}
	for _, c := range e.Components {
		share := 0.0
		if e.Total > 0 {
			share = float64(c.Bytes) / float64(e.Total)
		}
		out.Components = append(out.Components, Component{string(c.Name), c.Bytes, bytesize.Round(bytesize.InGiB(c.Bytes), 3), bytesize.Round(share, 4), x.Source(c.Name)})
	}
	for _, ch := range changes {
		cj := Change{Change: ch.What, TotalGB: bytesize.Round(bytesize.InGiB(ch.Estimate.Total), 3), Ratio: bytesize.Round(ch.Verdict.Ratio, 4), SavesGB: bytesize.Round(bytesize.InGiB(ch.Saves), 3),
			ExtraCompute: bytesize.Round(ch.Cost.ExtraCompute, 2), OffloadGB: bytesize.Round(bytesize.InGiB(ch.Cost.OffloadBytes), 3), ChangesResult: ch.Cost.ChangesResult,
			CostNotes: append([]string{}, ch.Cost.Notes...)}
		for _, ed := range ch.Edits {
			cj.Levers = append(cj.Levers, string(ed.Lever))
		}
		out.Changes = append(out.Changes, cj)
	}
	return out
}

func dropoutOf(r estimate.Request) float64 {
	if r.LoRADropout == nil || r.Method == estimate.Full {
		return 0
	}
	return *r.LoRADropout
}

// Detection is what the GPU probe of estimate found.
type Detection struct {
	// Status: "found", "none", "timeout" or "failed".
	Status  string     `json:"status"`
	Tool    string     `json:"tool,omitempty"`
	Message string     `json:"message,omitempty"`
	GPUs    []Detected `json:"gpus"`
}

// Detected is one GPU the probe found.
type Detected struct {
	Index      int    `json:"index"`
	Name       string `json:"name"`
	TotalBytes int64  `json:"total_bytes"`
	FreeBytes  int64  `json:"free_bytes"`
	MIG        bool   `json:"mig"`
}

// Placement is a model-parallel placement (seed 001): the chosen GPUs,
// the device map, why the others were left out, and the verdict of the pool.
type Placement struct {
	gpu.Selection
	// Reason says why the model is placed across GPUs.
	Reason     string  `json:"reason"`
	Fit        string  `json:"fit"`
	Ratio      float64 `json:"ratio"`
	UsableGB   float64 `json:"usable_gb"`
	RequiredGB float64 `json:"required_gb"`
	// SingleGPU is the verdict on the budget card alone.
	SingleGPU Verdict `json:"single_gpu"`
	// Indices are the chosen GPUs in order, as CUDA_VISIBLE_DEVICES takes them.
	CUDAVisibleDevices string `json:"cuda_visible_devices"`
}

// DataParallel is the per-GPU view of a sharded run.
type DataParallel struct {
	Strategy    estimate.Strategy `json:"strategy"`
	Nodes       int64             `json:"nodes"`
	GPUsPerNode int64             `json:"gpus_per_node"`
	WorldSize   int64             `json:"world_size"`
	// ShardGroup is how many GPUs the sharded state is divided by (the world
	// size; one node's GPUs for fsdp_hybrid_shard; 1 for ddp / no_shard).
	ShardGroup    int64            `json:"shard_group"`
	Offload       estimate.Offload `json:"cpu_offload"`
	HostPerGPUGB  float64          `json:"host_offload_per_gpu_gb"`
	HostPerNodeGB float64          `json:"host_offload_per_node_gb"`
	// Scaling says what changes with the node count.
	Scaling string `json:"scaling"`
	// CommBuffers are the communication buffers assumed, and whether the
	// total includes them.
	CommBuffers []string `json:"communication_buffers"`
}

// Annotate adds what the GPU setup and the placement decided to the
// document; the caller adds what a GPU probe found (Detection).
func (o *Estimate) Annotate(s placement.Setup, plan *placement.Plan) {
	if o.GPU != nil {
		o.GPU.Detected, o.GPU.BudgetSource = s.Detected, s.BudgetSource
		if s.Name != "" {
			o.GPU.Name = s.Name
		}
		if s.Detected {
			i := s.Index
			o.GPU.Index = &i
		}
		o.GPU.Count = s.Listed
	}
	o.Notes = append(o.Notes, s.Notes...)
	if p := plan.Placement; p != nil {
		o.Placement = NewPlacement(p)
		o.Verdict = Verdict{Fit: o.Placement.Fit, Ratio: o.Placement.Ratio, BudgetBytes: p.UsableBytes, BudgetGB: o.Placement.UsableGB,
			BudgetSource: "model-parallel placement over GPUs " + o.Placement.CUDAVisibleDevices + " (free memory, each beyond the first at 85 %)"}
	}
	if d := plan.DataParallel; d != nil {
		o.DataParallel = NewDataParallel(d)
	} else if plan.Placement == nil && s.Listed > 1 && len(s.Explicit) == 0 {
		o.Notes = append(o.Notes, fmt.Sprintf("one GPU holds the run, so the other %d listed are not used; with --strategy (ddp, fsdp_*, zero1-3) they would train data-parallel", s.Listed-1))
	}
}

// NewPlacement is the document of a model-parallel placement.
func NewPlacement(p *placement.Placement) *Placement {
	e := p.SingleGPU
	return &Placement{
		Selection: p.Selection, Reason: p.Reason, Fit: string(p.Verdict.Fit), Ratio: bytesize.Round(p.Verdict.Ratio, 4),
		UsableGB: bytesize.Round(bytesize.InGiB(p.UsableBytes), 3), RequiredGB: bytesize.Round(bytesize.InGiB(p.RequiredBytes), 3),
		SingleGPU:          Verdict{Fit: string(e.Fit), Ratio: bytesize.Round(e.Ratio, 4), BudgetBytes: e.Budget, BudgetGB: bytesize.Round(bytesize.InGiB(e.Budget), 3), BudgetSource: e.BudgetSource},
		CUDAVisibleDevices: joinIndex(p.Indices()),
	}
}

// NewDataParallel is the per-GPU view of a sharded run.
func NewDataParallel(d *placement.DataParallel) *DataParallel {
	return &DataParallel{Strategy: d.Strategy, Nodes: d.Nodes, GPUsPerNode: d.GPUsPerNode, WorldSize: d.WorldSize,
		ShardGroup: d.ShardGroup, Offload: d.Offload, HostPerGPUGB: bytesize.Round(bytesize.InGiB(d.HostPerGPU), 3), HostPerNodeGB: bytesize.Round(bytesize.InGiB(d.HostPerNode), 3),
		Scaling: d.Scaling, CommBuffers: d.CommBuffers}
}

func joinIndex(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

// seqLenP50 is the median of the request's length distribution (0: none).
func seqLenP50(r estimate.Request) int64 {
	if r.Lengths == nil {
		return 0
	}
	return r.Lengths.Median()
}

// targetLenOf is the decoder length an encoder-decoder request is estimated
// at (the source length when not given); 0 for other models.
func targetLenOf(r estimate.Request) int64 {
	if r.Model == nil || r.Model.Seq2Seq == nil {
		return 0
	}
	if r.TargetLen > 0 {
		return r.TargetLen
	}
	return r.SeqLen
}
