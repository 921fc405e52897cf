package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/canifinetune/canifinetune/bench"
)

// fakeProbePython is one of bench's fake Pythons (sh scripts).
func fakeProbePython(t *testing.T, name string) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the fake Pythons are sh scripts")
	}
	p, err := filepath.Abs(filepath.Join("..", "..", "bench", "testdata", "fakepy", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runBench runs `canifinetune bench args…` in-process and returns the probe
// configuration python (a fake probe that copies it) was handed.
func runBench(t *testing.T, python string, args ...string) (bench.ProbeConfig, int, string) {
	t.Helper()
	copyDir := t.TempDir()
	t.Setenv("FAKEPY_COPY_DIR", copyDir)
	var stdout, stderr bytes.Buffer
	args = append([]string{"bench"}, append(args, "--python", python, "--receipt", filepath.Join(t.TempDir(), "r.json"))...)
	code := Main(args, Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
	var cfg bench.ProbeConfig
	if b, err := os.ReadFile(filepath.Join(copyDir, "config.json")); err == nil {
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
	}
	return cfg, code, stderr.String()
}

// The probe runs in a temporary directory: a relative model path (the
// README's `bench ./my-model`) must reach it resolved against the caller's
// working directory; a Hub id passes unchanged.
func TestBenchResolvesRelativeModel(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "my-model"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "my-model", "config.json"), []byte(`{"model_type": "qwen2"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	python := fakeProbePython(t, "copy-config")
	t.Chdir(dir)
	want, err := filepath.EvalSymlinks(filepath.Join(dir, "my-model"))
	if err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{"./my-model", "my-model"} {
		cfg, code, stderr := runBench(t, python, arg, "--random-init")
		got, _ := filepath.EvalSymlinks(cfg.Model)
		if code != ExitOK || !filepath.IsAbs(cfg.Model) || got != want {
			t.Errorf("bench %s: exit %d, probe got model %q, want %s\n%s", arg, code, cfg.Model, want, stderr)
		}
	}
	if cfg, code, stderr := runBench(t, python, "Qwen/Qwen2.5-0.5B", "--random-init"); code != ExitOK || cfg.Model != "Qwen/Qwen2.5-0.5B" {
		t.Errorf("bench Qwen/Qwen2.5-0.5B: exit %d, probe got model %q\n%s", code, cfg.Model, stderr)
	}
}
