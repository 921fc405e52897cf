// Package probe finds what a machine has: its GPUs, by running nvidia-smi
// (else rocm-smi) under a timeout, and its Python training stack, by running
// the interpreter on a short script. It only runs the tools; what they print
// is read by package gpu's pure parsers (gpu.NVIDIAInventory,
// gpu.ROCmInventory, gpu.ParseStack), so that packages which need only the
// GPU table never reach os/exec.
//
// Prober and StackProber have real implementations (SMI, Python) and fakes
// for tests (Fake, FakeStack); a Runner runs the programs (ExecRunner, or a
// fake answering from captured output). Failures wrap ErrNoGPU,
// ErrProbeTimeout or ErrProbeFailed, on which callers branch (doctor exits 5
// on ErrNoGPU). It refuses to hang: every probe has a timeout, and a killed
// tool whose children hold its output open still returns.
package probe
