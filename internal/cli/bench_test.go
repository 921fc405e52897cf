package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

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

// bench takes estimate's request flags: the same spelling describes the same
// run to both commands, and what the probe cannot run is refused by name.
func TestBenchRequestVocabulary(t *testing.T) {
	python := fakeProbePython(t, "copy-config")
	base := func(mod func(*bench.ProbeConfig)) bench.ProbeConfig {
		c := bench.ProbeConfig{
			Model: "Qwen/Qwen2.5-0.5B", RandomInit: true, Method: "lora", Targets: []string{"q_proj", "k_proj", "v_proj", "o_proj"},
			Rank: 16, Precision: "bf16-true", Optimizer: "adamw_torch", Attn: "sdpa", SeqLen: 2048, Batch: 1, Updates: 3, GradAccum: 1,
		}
		mod(&c)
		return c
	}
	ok := []struct {
		args []string
		want bench.ProbeConfig
	}{
		{nil, base(func(*bench.ProbeConfig) {})},
		{[]string{"--grad-ckpt", "full", "--seq-len", "4096", "--batch", "2", "--grad-accum", "4"},
			base(func(c *bench.ProbeConfig) { c.GradCkpt, c.SeqLen, c.Batch, c.GradAccum = true, 4096, 2, 4 })},
		{[]string{"--grad-ckpt", "none", "--stack", "peft-accelerate", "--fused-ce", "none", "--lora-dropout", "0"}, base(func(*bench.ProbeConfig) {})},
		{[]string{"--method", "qlora"}, base(func(c *bench.ProbeConfig) {
			c.Method, c.Quant = "qlora", &bench.Quant{Scheme: "nf4", DoubleQuant: true}
		})},
		{[]string{"--method", "qlora", "--quant", "nf4-dq"}, base(func(c *bench.ProbeConfig) {
			c.Method, c.Quant = "qlora", &bench.Quant{Scheme: "nf4", DoubleQuant: true}
		})},
		{[]string{"--method", "qlora", "--quant", "nf4"}, base(func(c *bench.ProbeConfig) { c.Method, c.Quant = "qlora", &bench.Quant{Scheme: "nf4"} })},
		{[]string{"--targets", "attention,mlp", "--rank", "8"}, base(func(c *bench.ProbeConfig) {
			c.Targets, c.Rank = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}, 8
		})},
		{[]string{"--targets", "all-linear", "--precision", "bf16-mixed", "--optimizer", "adamw_8bit", "--attn", "eager"}, base(func(c *bench.ProbeConfig) {
			c.Targets, c.Precision, c.Optimizer, c.Attn = []string{"all-linear"}, "bf16-mixed", "adamw_8bit", "eager"
		})},
		{[]string{"--method", "full"}, base(func(c *bench.ProbeConfig) { c.Method, c.Rank, c.Targets = "full", 0, nil })},
	}
	for _, tt := range ok {
		args := append([]string{"Qwen/Qwen2.5-0.5B", "--random-init"}, tt.args...)
		got, code, stderr := runBench(t, python, args...)
		if code != ExitOK {
			t.Errorf("bench %s: exit %d\n%s", strings.Join(tt.args, " "), code, stderr)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("bench %s: probe config (-want +got):\n%s", strings.Join(tt.args, " "), diff)
		}
	}
	refused := []struct {
		args []string
		msg  string
	}{
		{[]string{"--grad-ckpt", "unsloth"}, "bench: --grad-ckpt unsloth: the probe runs none or full"},
		{[]string{"--method", "qlora", "--quant", "fp4"}, "bench: --quant fp4: the probe runs nf4 or nf4-dq"},
		{[]string{"--quant", "nf4"}, "bench: --quant nf4: only --method qlora quantizes"},
		{[]string{"--stack", "unsloth"}, "bench: --stack unsloth: the probe runs one stack: peft-accelerate"},
		{[]string{"--precision", "fp16-mixed"}, "bench: --precision fp16-mixed: the probe runs bf16-mixed, bf16-true, fp32"},
		{[]string{"--optimizer", "adafactor"}, "bench: --optimizer adafactor: the probe runs adamw_torch"},
		{[]string{"--attn", "flex_attention"}, "bench: --attn flex_attention: the probe runs sdpa"},
		{[]string{"--fused-ce", "liger"}, "bench: --fused-ce liger:"},
		{[]string{"--dynamic-padding"}, "bench: --dynamic-padding: the probe runs fixed-length"},
		{[]string{"--compile"}, "bench: --compile: the probe runs eager"},
		{[]string{"--optimizer-state-dtype", "bf16"}, "bench: --optimizer-state-dtype bf16:"},
		{[]string{"--extra-trainable", "lm_head"}, "bench: --extra-trainable lm_head: the probe runs adapters only"},
		{[]string{"--lora-dropout", "0.05"}, "bench: --lora-dropout 0.05: the probe runs lora_dropout 0"},
		{[]string{"--rank", "0"}, "bench: --rank 0"},
		{[]string{"--batch=-1"}, "bench: --batch -1: want a positive integer"},
		{[]string{"--seq-len", "4294967296"}, "bench: --seq-len 4294967296: want a positive integer"},
		{[]string{"--no-double-quant"}, "unknown flag --no-double-quant"},
	}
	for _, tt := range refused {
		args := append([]string{"Qwen/Qwen2.5-0.5B", "--random-init"}, tt.args...)
		got, code, stderr := runBench(t, python, args...)
		if code != ExitUsage || !strings.Contains(stderr, tt.msg) {
			t.Errorf("bench %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tt.args, " "), code, stderr, ExitUsage, tt.msg)
		}
		if got.Model != "" {
			t.Errorf("bench %s: the probe ran", strings.Join(tt.args, " "))
		}
	}
}
