package gpu

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// StackPackages are the Python packages the stack probe reports, by import
// name. A missing package is absent from Stack.Packages, never given a version.
var StackPackages = []string{"torch", "transformers", "peft", "bitsandbytes", "accelerate", "trl", "flash_attn", "liger_kernel"}

// Stack is the Python training stack found by a StackProber.
type Stack struct {
	// Python is the interpreter that was run.
	Python string `json:"python"`
	// PythonVersion is its version ("3.11.4").
	PythonVersion string `json:"python_version,omitempty"`
	// Packages maps an import name of StackPackages to its installed
	// distribution version; absent means not installed.
	Packages map[string]string `json:"packages"`
	// TorchCUDA is torch.version.cuda ("12.1"); empty for a CPU or ROCm build.
	TorchCUDA string `json:"torch_cuda,omitempty"`
	// TorchHIP is torch.version.hip on a ROCm build.
	TorchHIP string `json:"torch_hip,omitempty"`
	// CUDAAvailable is torch.cuda.is_available(); nil when torch could not be
	// imported.
	CUDAAvailable *bool `json:"cuda_available,omitempty"`
	// TorchError is why `import torch` failed, when it did.
	TorchError string `json:"torch_error,omitempty"`
	// ProbeError is why the probe itself failed (no interpreter, timeout,
	// garbage output); the other fields are then empty.
	ProbeError string `json:"probe_error,omitempty"`
}

// Has reports whether the import-named package is installed.
func (s Stack) Has(pkg string) bool { _, ok := s.Packages[pkg]; return ok }

// StackProber finds the Python training stack.
type StackProber interface {
	ProbeStack(ctx context.Context) (Stack, error)
}

// DefaultStackTimeout bounds the Python probe. `import torch` with CUDA
// initialisation takes several seconds on a cold cache; a minute is generous
// and still ends a wedged interpreter.
const DefaultStackTimeout = 60 * time.Second

// stackScript reads versions from installed distribution metadata (cheap,
// and true even when a package fails to import) and imports only torch, for
// its CUDA build and availability. It prints one JSON object.
const stackScript = `import json, sys
out = {"python_version": sys.version.split()[0], "packages": {}}
try:
    from importlib import metadata
except ImportError:
    metadata = None
dists = {"torch": ["torch"], "transformers": ["transformers"], "peft": ["peft"],
         "bitsandbytes": ["bitsandbytes"], "accelerate": ["accelerate"], "trl": ["trl"],
         "flash_attn": ["flash-attn", "flash_attn"], "liger_kernel": ["liger-kernel", "liger_kernel"]}
for key, names in dists.items():
    for name in names:
        try:
            out["packages"][key] = metadata.version(name)
            break
        except Exception:
            pass
if "torch" in out["packages"]:
    try:
        import torch
        out["torch_cuda"] = torch.version.cuda or ""
        out["torch_hip"] = getattr(torch.version, "hip", None) or ""
        out["cuda_available"] = bool(torch.cuda.is_available())
    except Exception as e:
        out["torch_error"] = "%s: %s" % (type(e).__name__, e)
print(json.dumps(out))
`

// PythonProber is the real StackProber: it runs Python with stackScript.
type PythonProber struct {
	// Python is the interpreter's path.
	Python string
	// Runner runs it; nil means ExecRunner.
	Runner Runner
	// Timeout bounds the run; 0 means DefaultStackTimeout.
	Timeout time.Duration
}

// ProbeStack implements StackProber. A failed probe returns a Stack with
// ProbeError set and the error.
func (p PythonProber) ProbeStack(ctx context.Context) (Stack, error) {
	run := p.Runner
	if run == nil {
		run = ExecRunner{}
	}
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = DefaultStackTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := os.Stat(p.Python); err != nil {
		return Stack{Python: p.Python, ProbeError: err.Error()}, fmt.Errorf("python %s: %w", p.Python, err)
	}
	out, err := run.Run(ctx, p.Python, "-c", stackScript)
	if err != nil {
		return Stack{Python: p.Python, ProbeError: err.Error()}, fmt.Errorf("probe the Python stack with %s: %w", p.Python, err)
	}
	s, err := ParseStack(out)
	if err != nil {
		return Stack{Python: p.Python, ProbeError: err.Error()}, fmt.Errorf("probe the Python stack with %s: %w", p.Python, err)
	}
	s.Python = p.Python
	return s, nil
}

// ParseStack parses the stack script's JSON. Only the last non-empty line is
// read, so that a warning a package prints at import does not break it.
// Unknown package keys and non-string versions are dropped.
func ParseStack(out []byte) (Stack, error) {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	var raw struct {
		PythonVersion string         `json:"python_version"`
		Packages      map[string]any `json:"packages"`
		TorchCUDA     *string        `json:"torch_cuda"`
		TorchHIP      *string        `json:"torch_hip"`
		CUDAAvailable *bool          `json:"cuda_available"`
		TorchError    string         `json:"torch_error"`
	}
	if err := json.Unmarshal([]byte(last), &raw); err != nil {
		return Stack{}, fmt.Errorf("the stack probe printed %q, not JSON: %w", clip(last), err)
	}
	s := Stack{PythonVersion: raw.PythonVersion, Packages: map[string]string{}, CUDAAvailable: raw.CUDAAvailable, TorchError: raw.TorchError}
	for k, v := range raw.Packages {
		if ver, ok := v.(string); ok && ver != "" && slices.Contains(StackPackages, k) {
			s.Packages[k] = ver
		}
	}
	if raw.TorchCUDA != nil {
		s.TorchCUDA = *raw.TorchCUDA
	}
	if raw.TorchHIP != nil {
		s.TorchHIP = *raw.TorchHIP
	}
	return s, nil
}

// FakeStackProber is a StackProber for tests.
type FakeStackProber struct {
	Stack Stack
	Err   error
}

// ProbeStack implements StackProber.
func (f FakeStackProber) ProbeStack(context.Context) (Stack, error) { return f.Stack, f.Err }
