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

	"github.com/canifinetune/canifinetune/gpu"
	"github.com/canifinetune/canifinetune/gpu/probe"
	"github.com/canifinetune/canifinetune/internal/bytesize"
	"github.com/canifinetune/canifinetune/oracle"
)

// DoctorCmd reports the machine's GPUs, the processes holding their memory,
// the Python training stack, and what will go wrong.
//
// Exit codes: 0 when GPUs were found (findings do not change it), 5
// (ExitNoGPU) when the machine has none, 1 when nvidia-smi / rocm-smi fails
// or does not answer within --timeout.
//
// Tools are looked up in $CANIFINETUNE_TOOL_PATH when set (a PATH-style
// list, for tests and unusual installs), else in $PATH.
//
// With --json it prints, schema "canifinetune.doctor/v1" (memory fields are
// null when the driver reported none, "[N/A]"):
//
//	{
//	  "schema": "canifinetune.doctor/v1",
//	  "tool": "nvidia-smi",            // "nvidia-smi" | "rocm-smi" | "" (no GPU)
//	  "driver_version": "550.54.14",
//	  "cuda_version": "12.4",          // highest CUDA the driver supports; "" on AMD
//	  "gpus": [{
//	    "index": 0, "name": "NVIDIA GeForce RTX 4090", "uuid": "GPU-…",
//	    "total_mib": 24564, "total_bytes": 25757220864, "total_gb": 23.99,
//	    "used_mib": …, "used_bytes": …, "used_gb": …,
//	    "free_mib": …, "free_bytes": …, "free_gb": …,
//	    "compute_capability": "8.9", "mig": false,
//	    "card": "NVIDIA GeForce RTX 4090",   // matched table row, null if none
//	    "bf16": true                          // from the table row, null if none
//	  }],
//	  "processes": [{"gpu_index": 0, "gpu_uuid": "GPU-…", "pid": 1873,
//	    "name": "/usr/lib/xorg/Xorg", "type": "G",
//	    "used_mib": 612, "used_bytes": 641728512, "used_gb": 0.59}],
//	  "python": {"python": "/usr/bin/python3", "python_version": "3.11.4",
//	    "packages": {"torch": "2.4.0", …},  // absent package: no key
//	    "torch_cuda": "12.1", "cuda_available": true,
//	    "torch_error": "…", "probe_error": "…"},   // python: null when not probed
//	  "simulation": {"available": true,   // estimate --simulate can run here
//	    "python": "/home/ana/.cache/canifinetune/venv-…/bin/python",
//	    "python_from": "the pinned environment",  // or --python, $CANIFINETUNE_PYTHON, PATH
//	    "versions": {"torch": "…", "transformers": "…", "peft": "…"},
//	    "missing": [], "reason": "…", "hint": "…"},  // reason, hint: when not available
//	  "findings": [{"code": "display-process", "severity": "warning",
//	    "gpu": 0, "message": "…", "hint": "…"}],
//	  "warnings": ["…"]
//	}
type DoctorCmd struct {
	JSON          bool          `help:"Print the report as JSON (schema canifinetune.doctor/v1; sizes in bytes, *_gb in GiB)."`
	Python        string        `help:"Python interpreter of the training environment (default: python3, then python, on PATH)." placeholder:"PATH"`
	Timeout       time.Duration `default:"10s" help:"How long nvidia-smi / rocm-smi may take before doctor gives up."`
	PythonTimeout time.Duration `default:"60s" help:"How long the Python stack probe (it imports torch) may take."`
}

// doctorSchema names the JSON layout; it changes only with a new version.
const doctorSchema = "canifinetune.doctor/v1"

// toolPath is where doctor looks for nvidia-smi, rocm-smi and python.
func toolPath(env *Env) string {
	if env.Getenv == nil {
		return ""
	}
	if p := env.Getenv("CANIFINETUNE_TOOL_PATH"); p != "" {
		return p
	}
	return env.Getenv("PATH")
}

// Help is the long help of `canifinetune doctor --help`.
func (c *DoctorCmd) Help() string {
	return `Reads the GPUs with nvidia-smi (rocm-smi on AMD): index, name, UUID, total /
used / free MiB, driver and CUDA version, compute capability, MIG mode, and the
processes holding memory, display compositors and browsers included. Probes
the Python training stack (torch and its CUDA, transformers, peft,
bitsandbytes, accelerate, trl, flash-attn, liger-kernel) and lists what will go
wrong. Says whether estimate --simulate can run (a Python with torch,
transformers and peft: --python, else the one --simulate would pick). Pass the
free memory it shows to estimate as --available-vram-gb.

Tools are looked up in $CANIFINETUNE_TOOL_PATH when set, else in $PATH.

Exit codes: 0 GPUs found, 5 no GPU on this machine, 1 nvidia-smi failed or hung.`
}

// DetectGPUs runs the real GPU probe the way doctor does: tools from
// CANIFINETUNE_TOOL_PATH or PATH, the whole probe bounded by timeout (0:
// probe.DefaultTimeout). It is what `estimate --gpu auto` calls; the error
// wraps gpu.ErrNoGPU, probe.ErrProbeTimeout or probe.ErrProbeFailed.
func DetectGPUs(ctx context.Context, env *Env, timeout time.Duration) (gpu.Inventory, error) {
	return probe.SMI{LookPath: probe.LookPathIn(toolPath(env)), Timeout: timeout}.Probe(ctx)
}

// Run probes the machine and prints the report.
func (c *DoctorCmd) Run(env *Env) error {
	if c.Timeout <= 0 || c.PythonTimeout <= 0 {
		return usageErrorf("canifinetune doctor --timeout 10s", "--timeout and --python-timeout must be positive durations")
	}
	look := probe.LookPathIn(toolPath(env))
	var stacker probe.StackProber
	stackPy := ""
	switch {
	case c.Python != "":
		py := c.Python
		// A bare name ("python3.11") is looked up like the tools; a path is used as given.
		if !strings.ContainsRune(py, filepath.Separator) {
			if p, err := look(py); err == nil {
				py = p
			}
		}
		stacker, stackPy = probe.Python{Python: py, Timeout: c.PythonTimeout}, py
	default:
		for _, name := range []string{"python3", "python"} {
			if p, err := look(name); err == nil {
				stacker, stackPy = probe.Python{Python: p, Timeout: c.PythonTimeout}, p
				break
			}
		}
		if stacker == nil {
			stacker = probe.FakeStack{Stack: gpu.Stack{ProbeError: "no python3 or python on PATH"}}
		}
	}
	// The Python estimate --simulate would run: the same one with --python,
	// else its own default (the pinned environment before python3), probed
	// separately when it is another interpreter.
	sim := simProbe{}
	if py, ok := simulationPython(env, c.Python); ok {
		sim.python = py
		if py.Path != stackPy {
			sim.prober = probe.Python{Python: py.Path, Timeout: c.PythonTimeout}
		}
	}
	return runDoctor(context.Background(), env, c, detectProber{env: env, timeout: c.Timeout}, stacker, sim)
}

// simProbe is the interpreter estimate --simulate would run and its prober;
// a nil prober means the training stack's probe already read it.
type simProbe struct {
	python oracle.Interpreter
	prober probe.StackProber
}

// doctorSimulationJSON is doctor's answer to whether estimate --simulate can run.
type doctorSimulationJSON struct {
	Available  bool              `json:"available"`
	Python     string            `json:"python"`
	PythonFrom string            `json:"python_from"`
	Versions   map[string]string `json:"versions"`
	Missing    []string          `json:"missing"`
	Reason     string            `json:"reason,omitempty"`
	Hint       string            `json:"hint,omitempty"`
}

// simulationStatus reads the oracle's needs (torch, transformers, peft that
// import) off a probed stack.
func simulationStatus(py oracle.Interpreter, s gpu.Stack) doctorSimulationJSON {
	out := doctorSimulationJSON{Python: py.Path, PythonFrom: py.From, Versions: map[string]string{}, Missing: []string{}}
	if py.Path == "" {
		out.Reason, out.Hint = "no python3 or python found", oracle.InstallHint
		return out
	}
	if s.ProbeError != "" {
		out.Reason, out.Hint = "the Python could not be probed: "+s.ProbeError, oracle.InstallHint
		return out
	}
	for _, m := range oracle.Modules {
		if v, ok := s.Packages[m]; ok {
			out.Versions[m] = v
		} else {
			out.Missing = append(out.Missing, m)
		}
	}
	switch {
	case len(out.Missing) > 0:
		out.Reason, out.Hint = "not installed: "+strings.Join(out.Missing, ", "), oracle.InstallHint
	case s.TorchError != "":
		out.Reason, out.Hint = "torch does not import: "+s.TorchError, oracle.InstallHint
	default:
		out.Available = true
	}
	return out
}

// detectProber is DetectGPUs as a probe.Prober.
type detectProber struct {
	env     *Env
	timeout time.Duration
}

func (p detectProber) Probe(ctx context.Context) (gpu.Inventory, error) {
	return DetectGPUs(ctx, p.env, p.timeout)
}

// runDoctor is doctor with its probes injected.
func runDoctor(ctx context.Context, env *Env, c *DoctorCmd, prober probe.Prober, stacker probe.StackProber, sim simProbe) error {
	inv, perr := prober.Probe(ctx)
	noGPU := errors.Is(perr, gpu.ErrNoGPU)
	if perr != nil && !noGPU {
		tool := "nvidia-smi"
		if inv.Tool != "" {
			tool = inv.Tool
		}
		if errors.Is(perr, probe.ErrProbeTimeout) {
			return &exitError{code: ExitError,
				err:  fmt.Errorf("%s did not answer within %s: %w", tool, c.Timeout, perr),
				hint: "a wedged driver makes nvidia-smi hang; run it yourself, check `dmesg`, or raise --timeout"}
		}
		return &exitError{code: ExitError,
			err:  fmt.Errorf("read the GPUs: %w", perr),
			hint: "run nvidia-smi yourself; \"Driver/library version mismatch\" is fixed by a reboot"}
	}
	if noGPU {
		inv = gpu.Inventory{}
	}
	stack, _ := stacker.ProbeStack(ctx) // a failed probe is reported in stack.ProbeError
	findings := gpu.Diagnose(inv, &stack)
	simStack := stack
	if sim.prober != nil {
		simStack, _ = sim.prober.ProbeStack(ctx)
	}
	simStatus := simulationStatus(sim.python, simStack)

	if c.JSON {
		rep := doctorReport(inv, &stack, findings)
		rep.Simulation = simStatus
		if err := writeJSON(env.Stdout, rep); err != nil {
			return err
		}
	} else if err := printDoctor(env.Stdout, inv, perr, &stack, findings, simStatus); err != nil {
		return err
	}
	if noGPU {
		return withCode(ExitNoGPU, perr)
	}
	return nil
}

type doctorJSON struct {
	Schema        string          `json:"schema"`
	Tool          string          `json:"tool"`
	DriverVersion string          `json:"driver_version"`
	CUDAVersion   string          `json:"cuda_version"`
	GPUs          []doctorGPUJSON `json:"gpus"`
	Processes     []processJSON   `json:"processes"`
	Python        *gpu.Stack      `json:"python"`
	Findings      []gpu.Finding   `json:"findings"`
	Warnings      []string        `json:"warnings"`
	// Simulation says whether estimate --simulate can run here.
	Simulation doctorSimulationJSON `json:"simulation"`
}

type doctorGPUJSON struct {
	Index             int      `json:"index"`
	Name              string   `json:"name"`
	UUID              string   `json:"uuid"`
	TotalMiB          *int64   `json:"total_mib"`
	TotalBytes        *int64   `json:"total_bytes"`
	TotalGB           *float64 `json:"total_gb"`
	UsedMiB           *int64   `json:"used_mib"`
	UsedBytes         *int64   `json:"used_bytes"`
	UsedGB            *float64 `json:"used_gb"`
	FreeMiB           *int64   `json:"free_mib"`
	FreeBytes         *int64   `json:"free_bytes"`
	FreeGB            *float64 `json:"free_gb"`
	ComputeCapability string   `json:"compute_capability"`
	MIG               bool     `json:"mig"`
	Card              *string  `json:"card"`
	BF16              *bool    `json:"bf16"`
}

type processJSON struct {
	GPUIndex  int      `json:"gpu_index"`
	GPUUUID   string   `json:"gpu_uuid"`
	PID       int      `json:"pid"`
	Name      string   `json:"name"`
	Type      string   `json:"type"`
	UsedMiB   *int64   `json:"used_mib"`
	UsedBytes *int64   `json:"used_bytes"`
	UsedGB    *float64 `json:"used_gb"`
}

// mem returns the MiB, bytes and GiB of a MiB reading, all nil when unknown.
func mem(mib int64) (*int64, *int64, *float64) {
	if mib < 0 {
		return nil, nil, nil
	}
	b := mib * gpu.MiB
	g := bytesize.InGiB(b)
	return &mib, &b, &g
}

func doctorReport(inv gpu.Inventory, stack *gpu.Stack, findings []gpu.Finding) doctorJSON {
	out := doctorJSON{Schema: doctorSchema, Tool: inv.Tool, DriverVersion: inv.Driver, CUDAVersion: inv.CUDA,
		GPUs: []doctorGPUJSON{}, Processes: []processJSON{}, Findings: findings, Warnings: inv.Warnings}
	if stack != nil {
		s := *stack
		if s.Packages == nil {
			s.Packages = map[string]string{}
		}
		out.Python = &s
	}
	if out.Findings == nil {
		out.Findings = []gpu.Finding{}
	}
	if out.Warnings == nil {
		out.Warnings = []string{}
	}
	for _, d := range inv.GPUs {
		g := doctorGPUJSON{Index: d.Index, Name: d.Name, UUID: d.UUID, ComputeCapability: d.ComputeCapability, MIG: d.MIG}
		g.TotalMiB, g.TotalBytes, g.TotalGB = mem(d.TotalMiB)
		g.UsedMiB, g.UsedBytes, g.UsedGB = mem(d.UsedMiB)
		g.FreeMiB, g.FreeBytes, g.FreeGB = mem(d.FreeMiB)
		if d.Card != nil {
			name, bf16 := d.Card.Name, d.Card.BF16
			g.Card, g.BF16 = &name, &bf16
		}
		out.GPUs = append(out.GPUs, g)
	}
	for _, p := range inv.Processes {
		j := processJSON{GPUIndex: p.GPUIndex, GPUUUID: p.GPUUUID, PID: p.PID, Name: p.Name, Type: p.Type}
		j.UsedMiB, j.UsedBytes, j.UsedGB = mem(p.UsedMiB)
		out.Processes = append(out.Processes, j)
	}
	return out
}

func mibCell(m int64) string {
	if m < 0 {
		return "?"
	}
	return fmt.Sprint(m)
}

func gibCell(m int64) string {
	if m < 0 {
		return "?"
	}
	return fmt.Sprintf("%.2f", bytesize.InGiB(m*bytesize.MiB))
}

func printDoctor(w io.Writer, inv gpu.Inventory, perr error, stack *gpu.Stack, findings []gpu.Finding, sim doctorSimulationJSON) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(inv.GPUs) == 0 {
		why := "no GPU was detected"
		if perr != nil {
			why = strings.TrimPrefix(perr.Error(), gpu.ErrNoGPU.Error()+": ")
		}
		fmt.Fprintf(tw, "No GPU found on this machine (%s).\n", why)
	} else {
		var about []string
		if inv.Driver != "" {
			about = append(about, "driver "+inv.Driver)
		}
		if inv.CUDA != "" {
			about = append(about, "CUDA "+inv.CUDA)
		}
		fmt.Fprintf(tw, "GPUs (%s)\n", strings.Join(append([]string{inv.Tool}, about...), ", "))
		fmt.Fprintln(tw, "IDX\tNAME\tTOTAL MiB\tUSED MiB\tFREE MiB\tFREE GiB\tCC\tMIG\tUUID")
		for _, d := range inv.GPUs {
			mig := "off"
			if d.MIG {
				mig = "on"
			}
			cc := d.ComputeCapability
			if cc == "" {
				cc = "?"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Index, d.Name, mibCell(d.TotalMiB), mibCell(d.UsedMiB),
				mibCell(d.FreeMiB), gibCell(d.FreeMiB), cc, mig, d.UUID)
		}
	}
	if len(inv.Processes) > 0 {
		fmt.Fprintln(tw, "\nProcesses holding GPU memory")
		fmt.Fprintln(tw, "GPU\tPID\tTYPE\tUSED MiB\tNAME")
		procs := slices.Clone(inv.Processes)
		slices.SortStableFunc(procs, func(a, b gpu.Process) int { return a.GPUIndex - b.GPUIndex })
		for _, p := range procs {
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\n", p.GPUIndex, p.PID, p.Type, mibCell(p.UsedMiB), p.Name)
		}
	}
	fmt.Fprintln(tw)
	switch {
	case stack == nil:
	case stack.ProbeError != "":
		fmt.Fprintf(tw, "Python: not probed (%s)\n", stack.ProbeError)
	default:
		fmt.Fprintf(tw, "Python: %s (%s)\n", stack.Python, stack.PythonVersion)
		for _, pkg := range gpu.StackPackages {
			v, ok := stack.Packages[pkg]
			if !ok {
				fmt.Fprintf(tw, "  %s\tnot installed\n", pkg)
				continue
			}
			if pkg == "torch" {
				v += torchDetail(stack)
			}
			fmt.Fprintf(tw, "  %s\t%s\n", pkg, v)
		}
	}
	printSimulationStatus(tw, sim)
	fmt.Fprintln(tw)
	if len(findings) == 0 {
		fmt.Fprintln(tw, "Findings: none.")
	} else {
		fmt.Fprintln(tw, "Findings")
		for _, f := range findings {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", f.Severity, f.Code, f.Message)
			if f.Hint != "" {
				fmt.Fprintf(tw, "  \t\tTry: %s\n", f.Hint)
			}
		}
	}
	return tw.Flush()
}

func torchDetail(s *gpu.Stack) string {
	var parts []string
	switch {
	case s.TorchCUDA != "":
		parts = append(parts, "CUDA "+s.TorchCUDA)
	case s.TorchHIP != "":
		parts = append(parts, "ROCm "+s.TorchHIP)
	}
	if s.CUDAAvailable != nil {
		if *s.CUDAAvailable {
			parts = append(parts, "GPU usable")
		} else {
			parts = append(parts, "GPU not usable")
		}
	}
	if s.TorchError != "" {
		parts = append(parts, "import fails")
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func printSimulationStatus(w io.Writer, s doctorSimulationJSON) {
	if !s.Available {
		py := ""
		if s.Python != "" {
			py = fmt.Sprintf(" with %s (%s)", s.Python, s.PythonFrom)
		}
		fmt.Fprintf(w, "Simulation (estimate --simulate): not available%s: %s\n  Try: %s\n", py, s.Reason, s.Hint)
		return
	}
	var vs []string
	for _, m := range oracle.Modules {
		vs = append(vs, m+" "+s.Versions[m])
	}
	fmt.Fprintf(w, "Simulation (estimate --simulate): available with %s (%s): %s\n", s.Python, s.PythonFrom, strings.Join(vs, ", "))
}
