package cli

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/canifinetune/canifinetune/internal/report"
)

// fakeOracle writes a sh script standing in for Python running the oracle's
// driver: it prints the given result line.
func fakeOracle(t *testing.T, line string) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the fake Python is a sh script")
	}
	p := filepath.Join(t.TempDir(), "python")
	script := "#!/bin/sh\ncat <<'EOF'\nCANIFINETUNE_SIMULATION " + strings.ReplaceAll(line, "\n", " ") + "\nEOF\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// The simulation block compares the oracle's figures with the estimate's own
// allocated level and phases, as printed in the same output.
func TestSimulateJSON(t *testing.T) {
	const sim = 2_000_000_000
	py := fakeOracle(t, `{"status": "ok", "python": "/fake/python", "python_version": "3.11.9",
"versions": {"torch": "2.9.0", "transformers": "4.99.0", "peft": "0.17.0"},
"result": {"peak_bytes": 2000000000, "phase_peak_bytes": {"forward": 1500000000, "loss": 1900000000, "backward": 2000000000, "optimizer": 1100000000},
"params_bytes": 1, "grads_bytes": 2, "optimizer_state_bytes": 3, "trainable_params": 4, "total_params": 5, "lora_targets": ["q_proj"], "cpu_s": 1.25}}`)
	for _, ckpt := range []string{"none", "full"} {
		t.Run(ckpt, func(t *testing.T) {
			stdout, stderr, code := runMain(t, "estimate", "Qwen/Qwen2.5-0.5B", "--gpu", "h100", "--seq-len", "1024", "--grad-ckpt", ckpt, "--simulate", "--python", py, "--json")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var out report.Estimate
			if err := json.Unmarshal([]byte(stdout), &out); err != nil {
				t.Fatal(err)
			}
			s := out.Simulation
			if s == nil {
				t.Fatal("no simulation block")
			}
			est := out.Levels.AllocatedBytes
			pct := func(e, m int64) float64 { return math.Round(10000*float64(e-m)/float64(m)) / 100 }
			if s.AllocatedBytes != sim || s.EstimateAllocatedBytes != est || s.DifferencePct != pct(est, sim) {
				t.Errorf("allocated %d vs estimate %d, difference %v %%; want %d vs %d, %v %%", s.AllocatedBytes, s.EstimateAllocatedBytes, s.DifferencePct, sim, est, pct(est, sim))
			}
			// The estimate's phases: the resident state plus each transient.
			resident := est - max(out.Phases.ForwardBytes, out.Phases.StepBytes)
			act, step := resident+out.Phases.ForwardBytes, resident+out.Phases.StepBytes
			type row struct {
				Phase    string
				Sim      int64
				Est      int64
				HasEst   bool
				DiffPct  float64
				SimGiB   float64
				EstGiBOK bool
			}
			var got []row
			for _, p := range s.Phases {
				r := row{Phase: p.Phase, Sim: p.AllocatedBytes, SimGiB: p.AllocatedGB}
				if p.EstimateAllocatedBytes != nil {
					r.Est, r.HasEst, r.DiffPct = *p.EstimateAllocatedBytes, true, *p.DifferencePct
					r.EstGiBOK = math.Abs(*p.EstimateAllocatedGB-float64(r.Est)/(1<<30)) < 0.001
				}
				got = append(got, r)
			}
			want := []row{
				{Phase: "forward", Sim: 1500000000, SimGiB: 1.397},
				{Phase: "loss", Sim: 1900000000, SimGiB: 1.77},
				{Phase: "backward", Sim: 2000000000, SimGiB: 1.863},
				{Phase: "forward_loss_backward", Sim: 2000000000, Est: act, HasEst: true, DiffPct: pct(act, 2000000000), SimGiB: 1.863, EstGiBOK: true},
				{Phase: "optimizer", Sim: 1100000000, Est: step, HasEst: true, DiffPct: pct(step, 1100000000), SimGiB: 1.024, EstGiBOK: true},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("phases (-want +got):\n%s", diff)
			}
			if max(act, step) != est {
				t.Errorf("the larger phase %d is not the allocated level %d", max(act, step), est)
			}
			if s.Versions["peft"] != "0.17.0" || s.CPUSeconds != 1.2 && s.CPUSeconds != 1.3 || len(s.NotSimulated) == 0 {
				t.Errorf("versions %v, cpu %v, not simulated %v", s.Versions, s.CPUSeconds, s.NotSimulated)
			}
		})
	}
}

// Estimators that sum every term have no phases: only the overall peak is compared.
func TestSimulateReferenceEstimatorHasNoPhaseFigures(t *testing.T) {
	py := fakeOracle(t, `{"status": "ok", "result": {"peak_bytes": 100, "phase_peak_bytes": {"forward": 10, "loss": 20, "backward": 100, "optimizer": 50}}}`)
	stdout, stderr, code := runMain(t, "estimate", "Qwen/Qwen2.5-0.5B", "--gpu", "h100", "--estimator", "reference", "--simulate", "--python", py, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var out report.Estimate
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatal(err)
	}
	if out.Simulation == nil || out.Simulation.EstimateAllocatedBytes != out.Levels.AllocatedBytes {
		t.Fatalf("simulation %+v", out.Simulation)
	}
	for _, p := range out.Simulation.Phases {
		if p.EstimateAllocatedBytes != nil {
			t.Errorf("phase %s has an estimate figure %d from an estimator without phases", p.Phase, *p.EstimateAllocatedBytes)
		}
	}
}

// TestSimulateRealOracle runs the real oracle with the Python in
// $CANIFINETUNE_PYTHON (the pinned environment: .ci/run sets it in its
// Python step). Without it the test is skipped: go test ./... needs no Python.
func TestSimulateRealOracle(t *testing.T) {
	py := os.Getenv("CANIFINETUNE_PYTHON")
	if py == "" {
		t.Skip("CANIFINETUNE_PYTHON is not set (.ci/run sets it to the pinned environment's python)")
	}
	stdout, stderr, code := runMain(t, "estimate", "Qwen/Qwen2.5-0.5B", "--gpu", "h100", "--seq-len", "256", "--grad-ckpt", "full", "--simulate", "--python", py, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var out report.Estimate
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatal(err)
	}
	s := out.Simulation
	if s == nil {
		t.Fatal("no simulation block")
	}
	for _, m := range []string{"torch", "transformers", "peft"} {
		if s.Versions[m] == "" {
			t.Errorf("no %s version in %v", m, s.Versions)
		}
	}
	// 494,032,768 bf16 parameters are resident; LoRA r16 on the attention
	// projections trains 2,162,688 (24 layers × (896+896 + 896+128 + 896+128 +
	// 896+896) × 16), as the estimate counts them.
	if s.ParamsBytes < 494_032_768*2 || s.TrainableParams != 2_162_688 || out.Model.TrainableParams != s.TrainableParams {
		t.Errorf("params bytes %d, trainable %d (the estimate's: %d)", s.ParamsBytes, s.TrainableParams, out.Model.TrainableParams)
	}
	if s.AllocatedBytes < s.ParamsBytes || math.Abs(s.DifferencePct) > 50 {
		t.Errorf("simulated %d bytes, %v %% from the estimate's %d", s.AllocatedBytes, s.DifferencePct, s.EstimateAllocatedBytes)
	}
	for _, p := range s.Phases {
		if p.AllocatedBytes <= 0 || p.AllocatedBytes > s.AllocatedBytes {
			t.Errorf("phase %s: %d bytes of a %d peak", p.Phase, p.AllocatedBytes, s.AllocatedBytes)
		}
	}
	t.Logf("Qwen2.5-0.5B LoRA seq 256 ckpt: estimate %d, simulated %d (%+.2f %%)", s.EstimateAllocatedBytes, s.AllocatedBytes, s.DifferencePct)

	// Within 1 % of the oracle: bf16-mixed under its autocast imitation,
	// where the estimate spells out the same tensors; and --stack pytorch,
	// the same model with the loop's own F.cross_entropy on the bf16 logits,
	// which the oracle runs too (the model called without labels).
	for _, c := range []struct {
		name string
		args []string
	}{
		{"LoRA bf16-mixed seq 256", []string{"--seq-len", "256", "--precision", "bf16-mixed"}},
		{"LoRA, the loop's own loss, seq 1024 × 2", []string{"--seq-len", "1024", "--batch", "2", "--grad-ckpt", "full", "--stack", "pytorch"}},
	} {
		args := append([]string{"estimate", "Qwen/Qwen2.5-0.5B", "--gpu", "h100", "--simulate", "--python", py, "--json"}, c.args...)
		stdout, stderr, code = runMain(t, args...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", c.name, code, stderr)
		}
		var e report.Estimate
		if err := json.Unmarshal([]byte(stdout), &e); err != nil {
			t.Fatal(err)
		}
		if s := e.Simulation; s == nil || math.Abs(s.DifferencePct) > 1 {
			t.Errorf("%s: simulation %+v", c.name, s)
		} else {
			t.Logf("Qwen2.5-0.5B %s: estimate %d, simulated %d (%+.2f %%)", c.name, s.EstimateAllocatedBytes, s.AllocatedBytes, s.DifferencePct)
		}
	}

	// The oracle refuses what it does not imitate, with its reason.
	_, stderr, code = runMain(t, "estimate", "Qwen/Qwen2.5-0.5B", "--gpu", "h100", "--precision", "fp16-mixed", "--simulate", "--python", py)
	if code != ExitError || !strings.Contains(stderr, "not simulated: precision fp16-mixed") {
		t.Errorf("fp16-mixed: exit %d, stderr %q", code, stderr)
	}
}
