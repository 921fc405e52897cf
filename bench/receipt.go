package bench

import (
	"fmt"
	"github.com/canifinetune/canifinetune/internal/bytesize"
	"time"
)

// SchemaVersion is the receipt format's version. It changes when a field is
// renamed or its meaning changes; adding an optional field keeps it.
const SchemaVersion = 1

// Status is how a probe ended.
type Status string

// The statuses a receipt can carry.
const (
	StatusSuccess     Status = "success"             // every update ran; the peaks are real
	StatusOOM         Status = "oom"                 // CUDA ran out of memory at Stage: the setting does not fit
	StatusConfigError Status = "configuration_error" // the configuration is invalid or the model rejects it
	StatusDependency  Status = "dependency_error"    // a Python module (MissingModule) or CUDA is missing
	StatusRuntime     Status = "runtime_error"       // the probe crashed, timed out or said nothing readable
	StatusInterrupted Status = "interrupted"         // a signal (Signal: SIGINT, SIGTERM) stopped the run; the probe was interrupted
	StatusNotRun      Status = "not_run"             // the probe reported that it never started
)

// Receipt is the record of one probe: what was asked, what ran, what it measured.
// It is written as JSON (see doc.go for the schema). A measured field that is
// not known is absent, never zero.
type Receipt struct {
	SchemaVersion int    `json:"schema_version"`
	ID            string `json:"id"`
	Tool          Tool   `json:"tool"`
	Status        Status `json:"status"`
	// Stage is the last stage the probe reached: setup, load, forward, backward,
	// optimizer or done. On a failure it is where the failure happened.
	Stage         string `json:"stage,omitempty"`
	Error         string `json:"error,omitempty"`
	ErrorType     string `json:"error_type,omitempty"`
	MissingModule string `json:"missing_module,omitempty"`
	// Signal names the signal that interrupted the run (status interrupted),
	// when the caller said which: SIGINT, SIGTERM.
	Signal string `json:"signal,omitempty"`
	// StderrTail is the end of the probe's stderr, kept when the probe failed
	// without a readable result so the user sees the traceback.
	StderrTail string    `json:"stderr_tail,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	DurationS  float64   `json:"duration_s"`
	Python     string    `json:"python,omitempty"`

	Config    ProbeConfig       `json:"config"`
	Effective *Effective        `json:"effective,omitempty"`
	GPU       *GPU              `json:"gpu,omitempty"`
	Software  map[string]string `json:"software,omitempty"`

	// Estimate is the estimate made before the run, absent when no estimator
	// was wired or it failed (EstimateError says why).
	Estimate      *EstimateRecord `json:"estimate,omitempty"`
	EstimateError string          `json:"estimate_error,omitempty"`

	CompletedUpdates int              `json:"completed_updates"`
	Measured         Measured         `json:"measured"`
	Timing           *Timing          `json:"timing,omitempty"`
	Updates          []UpdateRecord   `json:"updates,omitempty"`
	Optimizer        *OptimizerRecord `json:"optimizer,omitempty"`
	Trace            string           `json:"trace,omitempty"`
}

// Tool names the program that wrote a receipt.
type Tool struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// ProbeConfig is the configuration to train: the probe's input, recorded as asked.
type ProbeConfig struct {
	// Model is a Hugging Face id or a local directory (with --random-init, a
	// directory or file holding config.json is enough).
	Model string `json:"model"`
	// ModelID is the Hugging Face id the receipt and its case name when Model
	// is a local directory (scripts/device-check.sh probes copied configs).
	ModelID    string `json:"model_id,omitempty"`
	RandomInit bool   `json:"random_init"`
	Method     string `json:"method"` // full, lora, qlora
	// Targets are the LoRA target modules as the model names them, or ["all-linear"].
	Targets   []string `json:"targets,omitempty"`
	Rank      int      `json:"rank,omitempty"`
	Alpha     int      `json:"alpha,omitempty"`
	Precision string   `json:"precision"` // bf16-mixed, bf16-true, fp32
	Quant     *Quant   `json:"quant"`
	Optimizer string   `json:"optimizer"`
	Attn      string   `json:"attn"`
	GradCkpt  bool     `json:"grad_ckpt"`
	SeqLen    int      `json:"seq_len"`
	Batch     int      `json:"batch"`
	Updates   int      `json:"updates"`
	GradAccum int      `json:"grad_accum"`
	Device    int      `json:"device"`
	// Trace is where the probe writes a torch.profiler chrome trace; empty for none.
	Trace string `json:"trace,omitempty"`
}

// Quant is the 4-bit quantization of a qlora base model.
type Quant struct {
	Scheme      string `json:"scheme"` // nf4
	DoubleQuant bool   `json:"double_quant"`
}

// Effective is what the probe actually built, which can differ from what was
// asked (PEFT expands "all-linear", transformers may fall back to another
// attention implementation).
type Effective struct {
	RandomInit          bool     `json:"random_init"`
	ModelType           string   `json:"model_type,omitempty"`
	VocabSize           *int64   `json:"vocab_size,omitempty"`
	AttnImplementation  string   `json:"attn_implementation,omitempty"`
	Autocast            *string  `json:"autocast"`
	GradCkpt            bool     `json:"grad_ckpt"`
	UseReentrant        *bool    `json:"use_reentrant,omitempty"`
	Targets             []string `json:"targets,omitempty"`
	LoRAAlpha           *int     `json:"lora_alpha,omitempty"`
	NumParameters       *int64   `json:"num_parameters,omitempty"`
	TrainableParameters *int64   `json:"trainable_parameters,omitempty"`
	TrainableDtypes     []string `json:"trainable_dtypes,omitempty"`
	ParamDtypes         []string `json:"param_dtypes,omitempty"`
	TokensPerUpdate     *int64   `json:"tokens_per_update,omitempty"`
}

// GPU is the device the probe ran on.
type GPU struct {
	Index      int      `json:"index"`
	Name       string   `json:"name"`
	Driver     string   `json:"driver,omitempty"`
	Capability string   `json:"capability,omitempty"`
	TotalBytes *int64   `json:"total_bytes,omitempty"`
	TotalGB    *float64 `json:"total_gb,omitempty"`
}

// Measured holds the peaks and free-memory readings of the whole probe, in
// bytes and GiB (2^30 bytes, the *_gb fields). The peaks span loading and all
// completed updates. On an oom receipt they cover only what ran before the
// failure: a lower bound, not the peak the setting needs.
type Measured struct {
	// PeakAllocated is torch.cuda.max_memory_allocated.
	PeakAllocatedBytes *int64   `json:"peak_allocated_bytes,omitempty"`
	PeakAllocatedGB    *float64 `json:"peak_allocated_gb,omitempty"`
	// PeakReserved is torch.cuda.max_memory_reserved: what the caching allocator held.
	PeakReservedBytes *int64   `json:"peak_reserved_bytes,omitempty"`
	PeakReservedGB    *float64 `json:"peak_reserved_gb,omitempty"`
	// PeakActive is memory_stats()["active_bytes.all.peak"].
	PeakActiveBytes *int64   `json:"peak_active_bytes,omitempty"`
	PeakActiveGB    *float64 `json:"peak_active_gb,omitempty"`

	AfterLoadAllocatedBytes *int64   `json:"after_load_allocated_bytes,omitempty"`
	AfterLoadAllocatedGB    *float64 `json:"after_load_allocated_gb,omitempty"`
	AfterLoadReservedBytes  *int64   `json:"after_load_reserved_bytes,omitempty"`
	AfterLoadReservedGB     *float64 `json:"after_load_reserved_gb,omitempty"`
	LoadPeakAllocatedBytes  *int64   `json:"load_peak_allocated_bytes,omitempty"`
	LoadPeakAllocatedGB     *float64 `json:"load_peak_allocated_gb,omitempty"`
	LoadPeakReservedBytes   *int64   `json:"load_peak_reserved_bytes,omitempty"`
	LoadPeakReservedGB      *float64 `json:"load_peak_reserved_gb,omitempty"`

	// FreeBefore and FreeAfter are cudaMemGetInfo's free memory before loading
	// and after the run: the device's view, other processes included.
	FreeBeforeBytes  *int64   `json:"free_before_bytes,omitempty"`
	FreeBeforeGB     *float64 `json:"free_before_gb,omitempty"`
	FreeAfterBytes   *int64   `json:"free_after_bytes,omitempty"`
	FreeAfterGB      *float64 `json:"free_after_gb,omitempty"`
	DeviceTotalBytes *int64   `json:"device_total_bytes,omitempty"`
	DeviceTotalGB    *float64 `json:"device_total_gb,omitempty"`

	// AtFailure is what torch held when the probe failed (after an OOM the
	// failed allocation is not included).
	AtFailureAllocatedBytes *int64   `json:"at_failure_allocated_bytes,omitempty"`
	AtFailureAllocatedGB    *float64 `json:"at_failure_allocated_gb,omitempty"`
	AtFailureReservedBytes  *int64   `json:"at_failure_reserved_bytes,omitempty"`
	AtFailureReservedGB     *float64 `json:"at_failure_reserved_gb,omitempty"`
}

// Timing is the probe's speed. Step time and tokens/s leave out the first
// update when more ran (it pays for kernel selection and allocator warm-up).
type Timing struct {
	LoadS      *float64 `json:"load_s,omitempty"`
	MeanStepS  *float64 `json:"mean_step_s,omitempty"`
	TokensPerS *float64 `json:"tokens_per_s,omitempty"`
}

// UpdateRecord is one optimizer update; its peaks are that update's own
// (the counters are reset before it).
type UpdateRecord struct {
	Update             int      `json:"update"`
	StepS              *float64 `json:"step_s,omitempty"`
	Tokens             *int64   `json:"tokens,omitempty"`
	TokensPerS         *float64 `json:"tokens_per_s,omitempty"`
	Loss               *float64 `json:"loss,omitempty"`
	PeakAllocatedBytes *int64   `json:"peak_allocated_bytes,omitempty"`
	PeakAllocatedGB    *float64 `json:"peak_allocated_gb,omitempty"`
	PeakReservedBytes  *int64   `json:"peak_reserved_bytes,omitempty"`
	PeakReservedGB     *float64 `json:"peak_reserved_gb,omitempty"`
	PeakActiveBytes    *int64   `json:"peak_active_bytes,omitempty"`
	PeakActiveGB       *float64 `json:"peak_active_gb,omitempty"`
}

// OptimizerRecord is the optimizer as it was actually allocated.
type OptimizerRecord struct {
	Class string `json:"class"`
	// Impl is how a torch.optim optimizer steps (fused, foreach,
	// for-loop; own for other libraries'). Receipts written before it was
	// recorded lack it; their probe passed adamw_torch as
	// AdamW(fused=False), which torch runs as the for-loop.
	Impl       string        `json:"impl,omitempty"`
	States     []StateRecord `json:"states"`
	StateBytes *int64        `json:"state_bytes,omitempty"`
	StateGB    *float64      `json:"state_gb,omitempty"`
}

// StateRecord is the optimizer state tensors of one dtype.
type StateRecord struct {
	Dtype   string   `json:"dtype"`
	Tensors int      `json:"tensors"`
	Bytes   int64    `json:"bytes"`
	GB      *float64 `json:"gb,omitempty"`
}

// EstimateRecord is the estimate made before the run, so a receipt can be
// scored without re-running an estimator whose coefficients have since moved.
type EstimateRecord struct {
	Estimator string `json:"estimator"`
	Version   string `json:"version"`
	// Kind is the measurement kind the total predicts (reserved, process, …).
	Kind       string              `json:"kind,omitempty"`
	TotalBytes int64               `json:"total_bytes"`
	TotalGB    float64             `json:"total_gb"`
	Components []EstimateComponent `json:"components"`
}

// EstimateComponent is one term of an estimate (weights, activations, …).
type EstimateComponent struct {
	Name  string  `json:"name"`
	Bytes int64   `json:"bytes"`
	GB    float64 `json:"gb"`
}

// Estimator makes the estimate recorded before a probe runs. It is a function
// so that package bench need not import the memory model; the CLI wires it.
type Estimator func(cfg ProbeConfig) (*EstimateRecord, error)

// GiB converts bytes to GiB (2^30 bytes), rounded to 4 decimals (~0.1 MiB).
func GiB(bytes int64) float64 {
	return bytesize.RoundedGiB(bytes, 4)
}

func gibOf(b *int64) *float64 {
	if b == nil {
		return nil
	}
	g := GiB(*b)
	return &g
}

// fillGB sets every *_gb field from its bytes field, so the two never disagree
// and the probe reports bytes only.
func (r *Receipt) fillGB() {
	m := &r.Measured
	m.PeakAllocatedGB = gibOf(m.PeakAllocatedBytes)
	m.PeakReservedGB = gibOf(m.PeakReservedBytes)
	m.PeakActiveGB = gibOf(m.PeakActiveBytes)
	m.AfterLoadAllocatedGB = gibOf(m.AfterLoadAllocatedBytes)
	m.AfterLoadReservedGB = gibOf(m.AfterLoadReservedBytes)
	m.LoadPeakAllocatedGB = gibOf(m.LoadPeakAllocatedBytes)
	m.LoadPeakReservedGB = gibOf(m.LoadPeakReservedBytes)
	m.FreeBeforeGB = gibOf(m.FreeBeforeBytes)
	m.FreeAfterGB = gibOf(m.FreeAfterBytes)
	m.DeviceTotalGB = gibOf(m.DeviceTotalBytes)
	m.AtFailureAllocatedGB = gibOf(m.AtFailureAllocatedBytes)
	m.AtFailureReservedGB = gibOf(m.AtFailureReservedBytes)
	for i := range r.Updates {
		u := &r.Updates[i]
		u.PeakAllocatedGB = gibOf(u.PeakAllocatedBytes)
		u.PeakReservedGB = gibOf(u.PeakReservedBytes)
		u.PeakActiveGB = gibOf(u.PeakActiveBytes)
	}
	if r.GPU != nil {
		r.GPU.TotalGB = gibOf(r.GPU.TotalBytes)
	}
	if o := r.Optimizer; o != nil {
		o.StateGB = gibOf(o.StateBytes)
		for i := range o.States {
			o.States[i].GB = gibOf(&o.States[i].Bytes)
		}
	}
	if e := r.Estimate; e != nil {
		e.TotalGB = GiB(e.TotalBytes)
		for i := range e.Components {
			e.Components[i].GB = GiB(e.Components[i].Bytes)
		}
	}
}

// Valid reports whether s is one of the statuses above.
func (s Status) Valid() bool {
	switch s {
	case StatusSuccess, StatusOOM, StatusConfigError, StatusDependency, StatusRuntime, StatusInterrupted, StatusNotRun:
		return true
	}
	return false
}

// Config values the probe accepts; ValidateConfig checks against them.
var (
	Methods    = []string{"full", "lora", "qlora"}
	Precisions = []string{"bf16-mixed", "bf16-true", "fp32"}
	Optimizers = []string{"adamw_torch", "adamw_torch_fused", "adamw_torch_forloop", "sgd", "adamw_8bit", "paged_adamw_8bit"}
	AttnImpls  = []string{"sdpa", "eager", "flash_attention_2"}
)

// ValidateConfig reports the first problem with c, naming the field and value.
// It mirrors the probe's validate_config so a bad flag fails before Python starts.
func ValidateConfig(c ProbeConfig) error {
	oneOf := func(field, v string, allowed []string) error {
		for _, a := range allowed {
			if v == a {
				return nil
			}
		}
		return fmt.Errorf("%s: bad value %q (want one of %v)", field, v, allowed)
	}
	if c.Model == "" {
		return fmt.Errorf("model: empty (want a Hugging Face id or a local directory)")
	}
	for _, chk := range []struct {
		field, v string
		allowed  []string
	}{{"method", c.Method, Methods}, {"precision", c.Precision, Precisions}, {"optimizer", c.Optimizer, Optimizers}, {"attn", c.Attn, AttnImpls}} {
		if err := oneOf(chk.field, chk.v, chk.allowed); err != nil {
			return err
		}
	}
	for _, chk := range []struct {
		field string
		v     int
	}{{"seq_len", c.SeqLen}, {"batch", c.Batch}, {"updates", c.Updates}, {"grad_accum", c.GradAccum}} {
		if chk.v <= 0 {
			return fmt.Errorf("%s: bad value %d (want > 0)", chk.field, chk.v)
		}
	}
	if c.Device < 0 {
		return fmt.Errorf("device: bad value %d (want a CUDA device index >= 0)", c.Device)
	}
	switch c.Method {
	case "lora", "qlora":
		if c.Rank <= 0 {
			return fmt.Errorf("rank: bad value %d (want > 0 for %s)", c.Rank, c.Method)
		}
		if c.Alpha < 0 {
			return fmt.Errorf("alpha: bad value %d (want > 0, or 0 for 2×rank)", c.Alpha)
		}
		if len(c.Targets) == 0 {
			return fmt.Errorf("targets: empty (want module names, e.g. q_proj,v_proj, or all-linear)")
		}
		for _, t := range c.Targets {
			if t == "" {
				return fmt.Errorf("targets: empty module name in %q", c.Targets)
			}
		}
	}
	if c.Method == "qlora" {
		if c.Quant == nil || c.Quant.Scheme != "nf4" {
			return fmt.Errorf("quant: qlora needs scheme nf4, got %+v", c.Quant)
		}
		if c.Precision == "fp32" {
			return fmt.Errorf("precision: bad value %q for qlora (4-bit compute runs in bf16)", c.Precision)
		}
	} else if c.Quant != nil {
		return fmt.Errorf("quant: set for method %q (only qlora quantizes)", c.Method)
	}
	return nil
}
