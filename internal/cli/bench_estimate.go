package cli

import (
	"context"
	"fmt"

	"github.com/canifinetune/canifinetune/bench"
	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/evidence"
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
		rec.Components = append(rec.Components, bench.EstimateComponent{Name: c.Name, Bytes: c.Bytes})
	}
	return rec, nil
}

// probeRequest turns a probe configuration into an estimate request: the
// model through the same resolver as estimate, the rest by the mapping
// validate uses for the case the receipt becomes (evidence.RequestForModel
// on bench.ConfigCase), so that the estimate recorded before a run is the
// one validate makes for it afterwards. Models resolve without the network
// (catalog, local directory, Hugging Face cache), which RequestFor,
// catalog-only, cannot.
func probeRequest(env *Env, cfg bench.ProbeConfig) (estimate.Request, error) {
	// Offline: the estimate before a probe must not wait on the network; the
	// probe itself reads the same catalog config or Hugging Face cache.
	rm, err := resolveModel(context.Background(), env, cfg.Model, ModelFlags{Offline: true})
	if err != nil {
		return estimate.Request{}, err
	}
	req, _, why := evidence.RequestForModel(rm.Model, bench.ConfigCase(cfg))
	if why != "" {
		return estimate.Request{}, fmt.Errorf("estimate %s: %s", cfg.Model, why)
	}
	return req, nil
}
