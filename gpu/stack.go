package gpu

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// StackPackages are the Python packages the stack probe reports, by import
// name. A missing package is absent from Stack.Packages, never given a version.
var StackPackages = []string{"torch", "transformers", "peft", "bitsandbytes", "accelerate", "trl", "flash_attn", "liger_kernel"}

// Stack is the Python training stack, as the stack probe (gpu/probe)
// reports it.
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
