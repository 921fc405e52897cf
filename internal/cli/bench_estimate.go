package cli

import (
	"context"
	"fmt"

	"github.com/canifinetune/canifinetune/bench"
	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/gpu"
)

// probeEstimator is the estimate a receipt records before its run: the
// default estimator on the probe's own configuration, at the level the
// receipt measures (max_memory_reserved, bench.CaseKind). It detects the
// probe's device (bounded like estimate's detection) so that the GPU-sized
// terms use its real total; without one they are left out.
func probeEstimator(env *Env, device int) bench.Estimator {
	return func(cfg bench.ProbeConfig) (*bench.EstimateRecord, error) {
		var dev *gpu.Device
		ctx, cancel := context.WithTimeout(context.Background(), autoDetectTimeout)
		defer cancel()
		if inv, err := DetectGPUs(ctx, env, autoDetectTimeout); err == nil {
			if d, ok := inv.Device(device); ok && d.TotalMiB > 0 {
				dev = &d
			}
		}
		return estimateProbe(env, cfg, dev)
	}
}

// estimateProbe estimates a probe configuration with the default estimator.
func estimateProbe(env *Env, cfg bench.ProbeConfig, dev *gpu.Device) (*bench.EstimateRecord, error) {
	req, err := probeRequest(env, cfg)
	if err != nil {
		return nil, err
	}
	if dev != nil {
		req.GPUTotal = dev.TotalBytes()
	}
	est, err := estimate.ByName("")
	if err != nil {
		return nil, err
	}
	e, err := est.Estimate(req)
	if err != nil {
		return nil, fmt.Errorf("estimate %s: %w", cfg.Model, err)
	}
	// TotalBytes is the reserved level, the kind the receipt measures; the
	// components are the estimator's own, which sum to its planning total
	// (the reserved level plus the CUDA context and, with a GPU, the safety
	// margin), so that a receipt can be scored without re-running it.
	rec := &bench.EstimateRecord{Estimator: e.Estimator, Version: e.Version, Kind: string(bench.CaseKind), TotalBytes: e.Levels.Reserved}
	for _, c := range e.Components {
		rec.Components = append(rec.Components, bench.EstimateComponent{Name: string(c.Name), Bytes: c.Bytes})
	}
	return rec, nil
}

// probeRequest turns a probe configuration into an estimate request: the
// model through the same resolver as estimate, the stack the probe runs
// (bench.CaseFramework: torch AdamW, accelerate-style bf16 autocast, PEFT's
// prepare_model_for_kbit_training for QLoRA), so that the estimate matches
// what validate computes for the receipt once it is a case (evidence.RequestFor
// on bench.ToCase; TestProbeRequestMatchesCase holds the two together). Models
// resolve without the network (catalog, local directory, Hugging Face cache),
// which RequestFor, catalog-only, cannot.
func probeRequest(env *Env, cfg bench.ProbeConfig) (estimate.Request, error) {
	// Offline: the estimate before a probe must not wait on the network; the
	// probe itself reads the same catalog config or Hugging Face cache.
	rm, err := resolveModel(context.Background(), env, cfg.Model, ModelFlags{Offline: true})
	if err != nil {
		return estimate.Request{}, err
	}
	req := estimate.Request{
		Model: rm.Model, Method: estimate.Method(cfg.Method), Precision: estimate.Precision(cfg.Precision),
		SeqLen: int64(cfg.SeqLen), Batch: int64(cfg.Batch), GradAccum: int64(cfg.GradAccum), Optimizer: cfg.Optimizer, Attn: cfg.Attn,
		GradCkpt: "none", FusedCE: "none",
	}
	if cfg.GradCkpt {
		req.GradCkpt = "full"
	}
	if cfg.Method != "full" {
		req.LoRARank, req.LoRATargets = int64(cfg.Rank), cfg.Targets
	}
	if q := cfg.Quant; q != nil {
		req.Quant = q.Scheme
		if q.Scheme == "nf4" && q.DoubleQuant {
			req.Quant = "nf4-dq"
		}
	}
	st, err := estimate.StackByName(bench.CaseFramework)
	if err != nil {
		return estimate.Request{}, err
	}
	st.Apply(&req)
	return req, nil
}
