package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/gpu/probe"
	"github.com/canifinetune/canifinetune/internal/bytesize"
	"github.com/canifinetune/canifinetune/internal/report"
	"github.com/canifinetune/canifinetune/modelsource"
	"github.com/canifinetune/canifinetune/oracle"
)

// SimulateFlags are estimate's flags for the fake-tensor oracle.
type SimulateFlags struct {
	Simulate        bool          `help:"Also run the real training code (transformers' model, PEFT LoRA, torch AdamW) for two steps on meta tensors with --python's libraries, no GPU needed, and compare its allocated peak with the estimate's, phase by phase. Simulated: full and LoRA in bf16-true, bf16-mixed (HF Trainer's autocast), fp16-true or fp32, and QLoRA on a bitsandbytes nf4/fp4 base in bf16-true or bf16-mixed, with sdpa, eager or flash_attention_2 (flash-attn imitated: it need not be installed), on one GPU, for dense and MoE models that transformers implements."`
	Python          string        `placeholder:"PATH" help:"Python with torch, transformers and peft for --simulate (default: $CANIFINETUNE_PYTHON, else the environment scripts/python-env.sh created, else python3 on PATH)."`
	SimulateTimeout time.Duration `name:"simulate-timeout" default:"5m" help:"How long --simulate may run before it is stopped."`
}

// oracleName says what the simulated figure is, in the JSON and the table.
const oracleName = "fake-tensor oracle: two training steps on meta tensors, live storages rounded to 512 B"

// notSimulatedByFlags are the requests the oracle would not see: flags its
// request vocabulary does not carry. It refuses everything else it does not
// imitate itself (fp16-mixed, QLoRA in fp16 or fp32, 8-bit or GPTQ bases,
// sharding, fused kernels, …).
func notSimulatedByFlags(c *EstimateCmd, cfg report.Config) string {
	var why []string
	if len(c.Extra) > 0 {
		why = append(why, "--extra-trainable (modules trained in full beside the adapters)")
	}
	if c.OptimDtype != nil {
		why = append(why, "--optimizer-state-dtype (the oracle's optimizer keeps the parameters' dtype)")
	}
	if c.Compile {
		why = append(why, "--compile (torch.compile)")
	}
	if len(c.Kernels) > 0 || c.OptInBwd {
		why = append(why, "--kernels / --optimizer-in-backward (Triton and CUDA kernels do not run on meta tensors)")
	}
	if cfg.Stack != "" && cfg.Stack != estimate.StackHFTrainer && cfg.Stack != estimate.StackPyTorch {
		why = append(why, fmt.Sprintf("--stack %s (the oracle runs the HF Trainer + PEFT code path, or it with a plain loop's own loss: pytorch)", cfg.Stack))
	}
	return strings.Join(why, "; ")
}

// simulationPython is the interpreter --simulate runs: --python, else
// oracle.DefaultPython with python3 looked up like doctor's tools.
func simulationPython(env *Env, flag string) (oracle.Interpreter, bool) {
	look := probe.LookPathIn(toolPath(env))
	if flag != "" {
		py := flag
		if !strings.ContainsRune(py, filepath.Separator) {
			if p, err := look(py); err == nil {
				py = p
			}
		}
		return oracle.Interpreter{Path: py, From: "--python"}, true
	}
	getenv := env.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	return oracle.DefaultPython(getenv, look)
}

// simulate runs the oracle on the estimate's request and returns the
// comparison; its errors say what is missing or not simulated, exit 1.
func (c *EstimateCmd) simulate(env *Env, rm *modelsource.Resolved, out report.Estimate, phases estimate.Phases) (*report.Simulation, error) {
	if why := notSimulatedByFlags(c, out.Config); why != "" {
		return nil, &exitError{code: ExitError, err: fmt.Errorf("not simulated: %s", why),
			hint: "drop --simulate for the estimate alone, or drop those flags to simulate the rest"}
	}
	py, ok := simulationPython(env, c.Python)
	if !ok {
		return nil, &exitError{code: ExitError, err: errors.New("--simulate needs a Python with torch, transformers and peft; no python3 or python was found"),
			hint: oracle.InstallHint}
	}
	if len(rm.ConfigJSON) == 0 {
		return nil, fmt.Errorf("simulate %s: its config.json was not kept", rm.Name)
	}
	sim, err := oracle.Run(context.Background(), oracle.Options{Python: py.Path, ConfigJSON: rm.ConfigJSON, Request: out.Config, Model: rm.ID, Timeout: c.SimulateTimeout})
	if err != nil {
		return nil, simulationError(err, py)
	}
	return compareSimulation(sim, out, phases), nil
}

// simulationError is a failed simulation as the user reads it: what is
// missing and how to install it, what is not simulated, or why it failed.
func simulationError(err error, py oracle.Interpreter) error {
	var e *oracle.Error
	if !errors.As(err, &e) {
		return &exitError{code: ExitError, err: err}
	}
	from := fmt.Sprintf(" (%s, from %s)", py.Path, py.From)
	switch e.Kind {
	case oracle.NoPython:
		return &exitError{code: ExitError, err: fmt.Errorf("--simulate: cannot run Python %s: %s", py.Path, e.Reason), hint: oracle.InstallHint}
	case oracle.Missing:
		return &exitError{code: ExitError,
			err:  fmt.Errorf("--simulate needs torch, transformers and peft; the Python%s lacks %s: %w", from, strings.Join(e.Missing, ", "), err),
			hint: oracle.InstallHint}
	case oracle.NotSimulated:
		return &exitError{code: ExitError, err: err,
			hint: "drop --simulate for the estimate alone; the oracle simulates full and LoRA in bf16-true, bf16-mixed, fp16-true or fp32, and QLoRA on a bitsandbytes nf4/fp4 base in bf16-true, adamw_torch or sgd, on one GPU, for dense and MoE models transformers implements"}
	case oracle.Timeout:
		return &exitError{code: ExitError, err: err, hint: "raise --simulate-timeout"}
	}
	return &exitError{code: ExitError, err: err}
}

// compareSimulation sets the oracle's peaks beside the estimate's. The
// default estimator has two phase figures on top of the resident state: the
// activation phase (saved activations, the loss chain, or under
// checkpointing a block's recomputation in the backward), compared with the
// oracle's largest of forward, loss and backward; and the optimizer step
// (gradients, optimizer temporaries), compared with the oracle's optimizer
// phase. Other estimators sum every term and have no phase figures.
func compareSimulation(sim *oracle.Simulation, out report.Estimate, ph estimate.Phases) *report.Simulation {
	est := out.Levels.AllocatedBytes
	s := &report.Simulation{
		Oracle: oracleName, Python: sim.Python, PythonVersion: sim.PythonVersion, Versions: sim.Versions,
		AllocatedBytes: sim.PeakBytes, AllocatedGB: gib3(sim.PeakBytes),
		EstimateAllocatedBytes: est, EstimateAllocatedGB: gib3(est),
		DifferencePct: pctDiff(est, sim.PeakBytes),
		ParamsBytes:   sim.ParamsBytes, GradsBytes: sim.GradsBytes, OptimizerStateBytes: sim.OptimizerStateBytes,
		TrainableParams: sim.TrainableParams, LoRATargets: sim.LoRATargets,
		NotSimulated: slices.Clone(oracle.NotCounted), CPUSeconds: bytesize.Round(sim.CPUSeconds, 1),
	}
	if s.Versions == nil {
		s.Versions = map[string]string{}
	}
	var fwdLoss, step *int64 // the estimate's activation and optimizer-step phases
	if ph.Forward > 0 || ph.Step > 0 {
		resident := est - max(ph.Forward, ph.Step)
		f, st := resident+ph.Forward, resident+ph.Step
		fwdLoss, step = &f, &st
	}
	row := func(name string, simBytes int64, estBytes *int64) {
		p := report.SimulatedPhase{Phase: name, AllocatedBytes: simBytes, AllocatedGB: gib3(simBytes)}
		if estBytes != nil {
			g, d := gib3(*estBytes), pctDiff(*estBytes, simBytes)
			p.EstimateAllocatedBytes, p.EstimateAllocatedGB, p.DifferencePct = estBytes, &g, &d
		}
		s.Phases = append(s.Phases, p)
	}
	f, l, b := sim.PhaseBytes["forward"], sim.PhaseBytes["loss"], sim.PhaseBytes["backward"]
	row("forward", f, nil)
	row("loss", l, nil)
	row("backward", b, nil)
	row("forward_loss_backward", max(f, l, b), fwdLoss)
	row("optimizer", sim.PhaseBytes["optimizer"], step)
	return s
}

func gib3(b int64) float64 { return bytesize.Round(bytesize.InGiB(b), 3) }

// pctDiff is (est − sim) / sim in percent, to 0.01.
func pctDiff(est, sim int64) float64 {
	if sim <= 0 {
		return 0
	}
	return bytesize.Round(100*float64(est-sim)/float64(sim), 2)
}

// phaseWords names the phases in the table.
var phaseWords = map[string]string{
	"forward":               "forward",
	"loss":                  "loss",
	"forward_loss_backward": "forward/loss/backward peak",
	"backward":              "backward",
	"optimizer":             "optimizer step",
}

func printSimulation(w io.Writer, s *report.Simulation) {
	var vs []string
	for _, m := range oracle.Modules {
		if v, ok := s.Versions[m]; ok {
			vs = append(vs, m+" "+v)
		}
	}
	fmt.Fprintf(w, "\nsimulated allocated peak (%s;\n  %s, Python %s %s, %.1f CPU s):\n", oracleName, strings.Join(vs, ", "), s.Python, s.PythonVersion, s.CPUSeconds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  phase\testimate GiB\tsimulated GiB\tdifference\t")
	for _, p := range s.Phases {
		est, diff := "—", ""
		if p.EstimateAllocatedGB != nil {
			est, diff = fmt.Sprintf("%.3f", *p.EstimateAllocatedGB), fmt.Sprintf("%+.1f %%", *p.DifferencePct)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%.3f\t%s\t\n", phaseWords[p.Phase], est, p.AllocatedGB, diff)
	}
	fmt.Fprintf(tw, "  allocated peak\t%.3f\t%.3f\t%+.1f %%\t\n", s.EstimateAllocatedGB, s.AllocatedGB, s.DifferencePct)
	tw.Flush()
	fmt.Fprintf(w, "  difference: (estimate − simulated) / simulated; not simulated: %s\n", strings.Join(s.NotSimulated, "; "))
}
