package probe

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/canifinetune/canifinetune/gpu"
)

// StackProber finds the Python training stack.
type StackProber interface {
	ProbeStack(ctx context.Context) (gpu.Stack, error)
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

// Python is the real StackProber: it runs Python with stackScript.
type Python struct {
	// Python is the interpreter's path.
	Python string
	// Runner runs it; nil means ExecRunner.
	Runner Runner
	// Timeout bounds the run; 0 means DefaultStackTimeout.
	Timeout time.Duration
}

// ProbeStack implements StackProber. A failed probe returns a Stack with
// ProbeError set and the error.
func (p Python) ProbeStack(ctx context.Context) (gpu.Stack, error) {
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
		return gpu.Stack{Python: p.Python, ProbeError: err.Error()}, fmt.Errorf("python %s: %w", p.Python, err)
	}
	out, err := run.Run(ctx, p.Python, "-c", stackScript)
	if err != nil {
		return gpu.Stack{Python: p.Python, ProbeError: err.Error()}, fmt.Errorf("probe the Python stack with %s: %w", p.Python, err)
	}
	s, err := gpu.ParseStack(out)
	if err != nil {
		return gpu.Stack{Python: p.Python, ProbeError: err.Error()}, fmt.Errorf("probe the Python stack with %s: %w", p.Python, err)
	}
	s.Python = p.Python
	return s, nil
}

// FakeStack is a StackProber for tests.
type FakeStack struct {
	Stack gpu.Stack
	Err   error
}

// ProbeStack implements StackProber.
func (f FakeStack) ProbeStack(context.Context) (gpu.Stack, error) { return f.Stack, f.Err }
