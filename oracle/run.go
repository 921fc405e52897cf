package oracle

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The oracle and its driver, embedded so that an installed binary needs no
// checkout; requirements.lock names the pinned stack (see PinnedVenv).
var (
	//go:embed fakestep.py
	fakestepScript []byte
	//go:embed simulate.py
	driverScript []byte
	//go:embed qlora.py
	qloraScript []byte
	//go:embed requirements.lock
	lockFile []byte
)

// resultPrefix marks the driver's result line on stdout (PREFIX in simulate.py).
const resultPrefix = "CANIFINETUNE_SIMULATION "

// DefaultTimeout bounds one simulation: importing torch takes seconds, a
// 7B model's two steps under ten on two cores; an 80-layer model with
// gradient accumulation several times that.
const DefaultTimeout = 5 * time.Minute

// Modules are the Python packages the oracle imports.
var Modules = []string{"torch", "transformers", "peft"}

// InstallHint says how to get the stack the oracle needs.
const InstallHint = "pip install torch transformers peft  (or, in a checkout, scripts/python-env.sh for the pinned versions), then pass that Python with --python"

// NotCounted are the allocations a GPU run makes that the oracle does not
// see: its figure is torch.cuda.max_memory_allocated less these.
var NotCounted = []string{
	"cuBLAS workspaces and other allocations outside tensors",
	"the CUDA context",
	"the caching allocator's reserved-but-free memory (the reserved and process levels)",
}

// Options is one simulation.
type Options struct {
	// Python is the interpreter (a path, or a name looked up in PATH).
	Python string
	// ConfigJSON is the model's config.json.
	ConfigJSON []byte
	// Request is the training request in the vocabulary of estimate --json's
	// config block; it is written as JSON.
	Request any
	// Model names the model in the oracle's case row.
	Model string
	// Timeout bounds the run; 0 means DefaultTimeout.
	Timeout time.Duration
}

// Simulation is what the oracle measured on meta tensors.
type Simulation struct {
	Python        string
	PythonVersion string
	// Versions are the library versions the oracle ran (torch, transformers, peft).
	Versions map[string]string
	// PeakBytes is the peak of live tensor bytes on the training device over
	// two steps: the figure for torch.cuda.max_memory_allocated.
	PeakBytes int64
	// PhaseBytes is the peak per phase: forward, loss, backward, optimizer.
	PhaseBytes map[string]int64
	// State at the peak's phases: parameters (frozen and trained), gradients
	// of the trained parameters, optimizer states.
	ParamsBytes, GradsBytes, OptimizerStateBytes int64
	TrainableParams, TotalParams                 int64
	// LoRATargets are the module names the adapters were put on.
	LoRATargets []string
	// CPUSeconds is the oracle's CPU time for the case (build and run).
	CPUSeconds float64
	// Case is the measurements-schema row the oracle writes for the case.
	Case json.RawMessage
}

// Phases are the oracle's phases, in the order a step runs them.
var Phases = []string{"forward", "loss", "backward", "optimizer"}

// Kind says what stopped a simulation.
type Kind int

const (
	// NoPython: the interpreter could not be started.
	NoPython Kind = iota + 1
	// Missing: torch, transformers or peft cannot be imported.
	Missing
	// NotSimulated: the oracle refuses the request (Reason says what it does not imitate).
	NotSimulated
	// Failed: the request was bad, the run raised, or no result came back.
	Failed
	// Timeout: the run passed its time limit and was killed.
	Timeout
)

// Error is a simulation that gave no figures.
type Error struct {
	Kind   Kind
	Python string
	// Missing names the modules that did not import, and ImportErrors why.
	Missing      []string
	ImportErrors map[string]string
	// Reason is the oracle's refusal or the failure.
	Reason string
	// StderrTail is the end of the interpreter's stderr for a failed run.
	StderrTail string
}

func (e *Error) Error() string {
	switch e.Kind {
	case NoPython:
		return fmt.Sprintf("simulation: cannot run Python %s: %s", e.Python, e.Reason)
	case Missing:
		var why []string
		for _, m := range e.Missing {
			why = append(why, fmt.Sprintf("%s (%s)", m, e.ImportErrors[m]))
		}
		return fmt.Sprintf("simulation needs torch, transformers and peft; Python %s cannot import %s", e.Python, strings.Join(why, ", "))
	case NotSimulated:
		return "not simulated: " + e.Reason
	case Timeout:
		return fmt.Sprintf("simulation with Python %s %s", e.Python, e.Reason)
	}
	msg := fmt.Sprintf("simulation with Python %s failed: %s", e.Python, e.Reason)
	if tail := strings.TrimSpace(e.StderrTail); tail != "" {
		msg += "\n" + tail
	}
	return msg
}

// stderrTailBytes is how much of a failed run's stderr an Error keeps.
const stderrTailBytes = 2048

// Run simulates one request. The error is an *Error.
func Run(ctx context.Context, o Options) (*Simulation, error) {
	python := o.Python
	if python == "" {
		python = "python3"
	}
	fail := func(k Kind, format string, args ...any) (*Simulation, error) {
		return nil, &Error{Kind: k, Python: python, Reason: fmt.Sprintf(format, args...)}
	}
	req, err := json.Marshal(o.Request)
	if err != nil {
		return fail(Failed, "encode the request: %v", err)
	}
	dir, err := os.MkdirTemp("", "canifinetune-simulate-")
	if err != nil {
		return fail(Failed, "create a directory for the oracle: %v", err)
	}
	defer os.RemoveAll(dir)
	cfgDir := filepath.Join(dir, "model")
	files := []struct {
		path string
		data []byte
	}{
		{filepath.Join(dir, "fakestep.py"), fakestepScript},
		{filepath.Join(dir, "simulate.py"), driverScript},
		{filepath.Join(dir, "qlora.py"), qloraScript},
		{filepath.Join(dir, "request.json"), req},
		{filepath.Join(cfgDir, "config.json"), o.ConfigJSON},
	}
	if err := os.Mkdir(cfgDir, 0o700); err != nil {
		return fail(Failed, "write the oracle's files: %v", err)
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return fail(Failed, "write the oracle's files: %v", err)
		}
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := []string{filepath.Join(dir, "simulate.py"), "--config", cfgDir, "--request", filepath.Join(dir, "request.json")}
	if o.Model != "" {
		args = append(args, "--model", o.Model)
	}
	cmd := exec.CommandContext(runCtx, python, args...)
	cmd.Dir = dir
	// No bytecode cache beside the scripts, and no user site warnings on stdout.
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
	var stdout bytes.Buffer
	stderr := &tailBuffer{max: stderrTailBytes}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	setProcessGroup(cmd)
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = 2 * time.Second
	runErr := cmd.Run()
	_ = killGroup(cmd) // the oracle's children must not outlive it
	if cmd.Process == nil && runErr != nil {
		return fail(NoPython, "%v", runErr)
	}
	if errors.Is(runCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		return fail(Timeout, "did not finish within %v and was stopped (a large model or many micro-batches; raise --simulate-timeout)", timeout)
	}
	if ctx.Err() != nil {
		return fail(Failed, "interrupted: %v", context.Cause(ctx))
	}
	out, perr := parseOutput(stdout.Bytes())
	if perr != nil {
		e := &Error{Kind: Failed, Python: python, Reason: perr.Error(), StderrTail: stderr.String()}
		if runErr != nil {
			e.Reason = fmt.Sprintf("%v; %s", runErr, perr)
		}
		return nil, e
	}
	return out.simulation(python, stderr.String())
}

// output is simulate.py's result line.
type output struct {
	Status        string            `json:"status"`
	Python        string            `json:"python"`
	PythonVersion string            `json:"python_version"`
	Versions      map[string]string `json:"versions"`
	Missing       []string          `json:"missing"`
	ImportErrors  map[string]string `json:"import_errors"`
	Reason        string            `json:"reason"`
	Result        *struct {
		PeakBytes            int64            `json:"peak_bytes"`
		PhasePeakBytes       map[string]int64 `json:"phase_peak_bytes"`
		ParamsBytes          int64            `json:"params_bytes"`
		GradsBytes           int64            `json:"grads_bytes"`
		OptimizerStateBytes  int64            `json:"optimizer_state_bytes"`
		TrainableParams      int64            `json:"trainable_params"`
		TotalParams          int64            `json:"total_params"`
		LoRATargets          []string         `json:"lora_targets"`
		CPUSeconds           float64          `json:"cpu_s"`
		TrainableParamsBytes int64            `json:"trainable_params_bytes"`
	} `json:"result"`
	Case json.RawMessage `json:"case"`
}

// parseOutput reads the last result line of the driver's stdout; lines a
// library prints around it are skipped.
func parseOutput(stdout []byte) (output, error) {
	var line []byte
	for _, l := range bytes.Split(stdout, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(bytes.TrimRight(l, "\r"), []byte(resultPrefix)); ok {
			line = rest
		}
	}
	var o output
	if line == nil {
		return o, errors.New("the oracle printed no result line")
	}
	if err := json.Unmarshal(line, &o); err != nil {
		return o, fmt.Errorf("the oracle's result line: %v", err)
	}
	switch o.Status {
	case "ok":
		if o.Result == nil {
			return o, errors.New("the oracle's result line: status ok without a result")
		}
		r := o.Result
		if r.PeakBytes <= 0 {
			return o, fmt.Errorf("the oracle's result line: field peak_bytes: bad value %d (want a positive count)", r.PeakBytes)
		}
		for _, p := range Phases {
			b, ok := r.PhasePeakBytes[p]
			if !ok || b < 0 || b > r.PeakBytes {
				return o, fmt.Errorf("the oracle's result line: field phase_peak_bytes.%s: bad value %d (want 0..peak_bytes %d)", p, b, r.PeakBytes)
			}
		}
	case "missing":
		if len(o.Missing) == 0 {
			return o, errors.New("the oracle's result line: status missing names no module")
		}
	case "not_simulated", "error":
		if o.Reason == "" {
			return o, fmt.Errorf("the oracle's result line: status %s without a reason", o.Status)
		}
	default:
		return o, fmt.Errorf("the oracle's result line: field status: bad value %q", o.Status)
	}
	return o, nil
}

// simulation turns a parsed result line into the result or the error.
func (o output) simulation(python, stderr string) (*Simulation, error) {
	if o.Python != "" {
		python = o.Python
	}
	switch o.Status {
	case "missing":
		return nil, &Error{Kind: Missing, Python: python, Missing: o.Missing, ImportErrors: o.ImportErrors}
	case "not_simulated":
		return nil, &Error{Kind: NotSimulated, Python: python, Reason: o.Reason}
	case "error":
		return nil, &Error{Kind: Failed, Python: python, Reason: o.Reason, StderrTail: stderr}
	}
	r := o.Result
	return &Simulation{
		Python: python, PythonVersion: o.PythonVersion, Versions: o.Versions,
		PeakBytes: r.PeakBytes, PhaseBytes: r.PhasePeakBytes,
		ParamsBytes: r.ParamsBytes, GradsBytes: r.GradsBytes, OptimizerStateBytes: r.OptimizerStateBytes,
		TrainableParams: r.TrainableParams, TotalParams: r.TotalParams, LoRATargets: r.LoRATargets,
		CPUSeconds: r.CPUSeconds, Case: o.Case,
	}, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.buf) }

// LockHash is the first 12 hex digits of the sha256 of the embedded
// requirements.lock: the key scripts/python-env.sh names its environment by.
func LockHash() string {
	sum := sha256.Sum256(lockFile)
	return hex.EncodeToString(sum[:])[:12]
}

// PinnedVenv is the directory scripts/python-env.sh creates for the embedded
// lock file:
// ${CANIFINETUNE_PY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/canifinetune}/venv-<LockHash>.
// It is "" when neither the cache variables nor HOME are set.
func PinnedVenv(getenv func(string) string) string {
	cache := getenv("CANIFINETUNE_PY_CACHE")
	if cache == "" {
		base := getenv("XDG_CACHE_HOME")
		if base == "" {
			home := getenv("HOME")
			if home == "" {
				return ""
			}
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "canifinetune")
	}
	return filepath.Join(cache, "venv-"+LockHash())
}

// Interpreter is a Python chosen for the oracle and where the choice came from.
type Interpreter struct {
	Path string
	// From is "--python", "$CANIFINETUNE_PYTHON", "$CANIFINETUNE_VENV",
	// "the pinned environment" or "PATH".
	From string
}

// DefaultPython chooses the interpreter when --python is not given:
// $CANIFINETUNE_PYTHON; else $CANIFINETUNE_VENV/bin/python; else the pinned
// environment's bin/python when scripts/python-env.sh completed it; else
// python3 (then python) found by lookPath. ok is false when none is found.
func DefaultPython(getenv func(string) string, lookPath func(string) (string, error)) (Interpreter, bool) {
	if p := getenv("CANIFINETUNE_PYTHON"); p != "" {
		return Interpreter{p, "$CANIFINETUNE_PYTHON"}, true
	}
	if v := getenv("CANIFINETUNE_VENV"); v != "" {
		return Interpreter{filepath.Join(v, "bin", "python"), "$CANIFINETUNE_VENV"}, true
	}
	if v := PinnedVenv(getenv); v != "" {
		py := filepath.Join(v, "bin", "python")
		if isFile(filepath.Join(v, ".complete")) && isFile(py) {
			return Interpreter{py, "the pinned environment"}, true
		}
	}
	for _, name := range []string{"python3", "python"} {
		if p, err := lookPath(name); err == nil {
			return Interpreter{p, "PATH"}, true
		}
	}
	return Interpreter{}, false
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}
