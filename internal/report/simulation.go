package report

// Simulation is estimate --json's "simulation" block: the fake-tensor
// oracle's allocated peaks beside the estimate's (docs/estimate-json.md).
type Simulation struct {
	Oracle        string            `json:"oracle"`
	Python        string            `json:"python"`
	PythonVersion string            `json:"python_version"`
	Versions      map[string]string `json:"versions"`
	// AllocatedBytes is the oracle's peak of live tensor bytes (the figure
	// for torch.cuda.max_memory_allocated, less what NotSimulated lists).
	AllocatedBytes int64   `json:"allocated_bytes"`
	AllocatedGB    float64 `json:"allocated_gb"`
	// EstimateAllocatedBytes is the estimate's allocated level, compared.
	EstimateAllocatedBytes int64   `json:"estimate_allocated_bytes"`
	EstimateAllocatedGB    float64 `json:"estimate_allocated_gb"`
	// DifferencePct is (estimate − simulated) / simulated × 100.
	DifferencePct float64          `json:"difference_pct"`
	Phases        []SimulatedPhase `json:"phases"`
	// ParamsBytes, GradsBytes, OptimizerStateBytes: the state the oracle held.
	ParamsBytes         int64    `json:"params_bytes"`
	GradsBytes          int64    `json:"grads_bytes"`
	OptimizerStateBytes int64    `json:"optimizer_state_bytes"`
	TrainableParams     int64    `json:"trainable_params"`
	LoRATargets         []string `json:"lora_targets,omitempty"`
	NotSimulated        []string `json:"not_simulated"`
	CPUSeconds          float64  `json:"cpu_seconds"`
}

// SimulatedPhase is one phase's peak: the oracle's, and the estimate's where
// the estimator has a figure for that phase (null otherwise).
type SimulatedPhase struct {
	Phase                  string   `json:"phase"`
	AllocatedBytes         int64    `json:"allocated_bytes"`
	AllocatedGB            float64  `json:"allocated_gb"`
	EstimateAllocatedBytes *int64   `json:"estimate_allocated_bytes"`
	EstimateAllocatedGB    *float64 `json:"estimate_allocated_gb"`
	DifferencePct          *float64 `json:"difference_pct"`
}
