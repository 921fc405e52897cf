package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func fakePython(t *testing.T, name string) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the fake Pythons are sh scripts")
	}
	p, err := filepath.Abs(filepath.Join("testdata", "fakepy", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func loraConfig() ProbeConfig {
	return ProbeConfig{
		Model: "Qwen/Qwen2.5-0.5B", RandomInit: true, Method: "lora", Targets: []string{"q_proj", "v_proj"},
		Rank: 16, Alpha: 32, Precision: "bf16-true", Optimizer: "adamw_torch", Attn: "sdpa",
		SeqLen: 1024, Batch: 2, Updates: 3, GradAccum: 1,
	}
}

var fixedNow = func() time.Time { return time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC) }

// runFake runs the probe with a fake Python and returns the receipt Run
// returned and the one it wrote, checking they agree and no temp file is left.
func runFake(t *testing.T, fake string, mod func(*Options)) Receipt {
	t.Helper()
	dir := t.TempDir()
	opts := Options{
		Config: loraConfig(), Python: fakePython(t, fake), ReceiptPath: filepath.Join(dir, "receipt.json"),
		Timeout: 20 * time.Second, GracePeriod: 2 * time.Second, ToolVersion: "0.1.0-test", Now: fixedNow,
	}
	if mod != nil {
		mod(&opts)
	}
	got, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	written, err := ReadReceipt(opts.ReceiptPath)
	if err != nil {
		t.Fatalf("ReadReceipt: %v", err)
	}
	if diff := cmp.Diff(got, written); diff != "" {
		t.Errorf("written receipt differs from returned (-returned +written):\n%s", diff)
	}
	assertOnlyFile(t, dir, "receipt.json")
	return got
}

func assertOnlyFile(t *testing.T, dir, name string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{name}, names); diff != "" {
		t.Errorf("files in %s (-want +got):\n%s", dir, diff)
	}
}

func TestRunStatuses(t *testing.T) {
	tests := []struct {
		fake       string
		status     Status
		stage      string
		errHas     string
		updates    int
		stderrTail bool
	}{
		{fake: "success", status: StatusSuccess, stage: "done", updates: 3},
		{fake: "stdout-only", status: StatusSuccess, stage: "done", updates: 1},
		{fake: "oom", status: StatusOOM, stage: "backward", errHas: "CUDA out of memory", updates: 1},
		{fake: "dependency", status: StatusDependency, stage: "setup", errHas: "No module named 'torch'"},
		{fake: "crash", status: StatusRuntime, errHas: "exit status 139", stderrTail: true},
		{fake: "garbage", status: StatusRuntime, errHas: "probe gave no result", stderrTail: false},
		{fake: "bad-status", status: StatusRuntime, errHas: `field status: bad value "fine"`},
	}
	for _, tt := range tests {
		t.Run(tt.fake, func(t *testing.T) {
			r := runFake(t, tt.fake, nil)
			if r.Status != tt.status || r.Stage != tt.stage || r.CompletedUpdates != tt.updates {
				t.Errorf("status, stage, updates = %s, %q, %d; want %s, %q, %d (error %q)", r.Status, r.Stage, r.CompletedUpdates, tt.status, tt.stage, tt.updates, r.Error)
			}
			if !strings.Contains(r.Error, tt.errHas) {
				t.Errorf("error = %q, want it to contain %q", r.Error, tt.errHas)
			}
			if tt.stderrTail && !strings.Contains(r.StderrTail, "Segmentation fault") {
				t.Errorf("stderr_tail = %q, want the traceback", r.StderrTail)
			}
			if r.SchemaVersion != SchemaVersion || r.ID != "bench-20261130T020000Z-qwen2.5-0.5b-lora-s1024-b2-f08630" {
				t.Errorf("schema_version, id = %d, %q", r.SchemaVersion, r.ID)
			}
		})
	}
}

func TestRunSuccessReceipt(t *testing.T) {
	r := runFake(t, "success", nil)
	m := r.Measured
	if m.PeakReservedBytes == nil || *m.PeakReservedBytes != 6442450944 || m.PeakReservedGB == nil || *m.PeakReservedGB != 6 {
		t.Errorf("peak reserved = %v bytes, %v GiB; want 6442450944, 6", m.PeakReservedBytes, m.PeakReservedGB)
	}
	if m.PeakAllocatedGB == nil || *m.PeakAllocatedGB != 5 {
		t.Errorf("peak allocated GiB = %v, want 5", m.PeakAllocatedGB)
	}
	// The fake reports no failure readings: they must stay absent, not zero.
	if m.AtFailureReservedBytes != nil || m.AtFailureReservedGB != nil {
		t.Errorf("at_failure fields present on a success: %v %v", m.AtFailureReservedBytes, m.AtFailureReservedGB)
	}
	if r.Updates[0].PeakReservedGB == nil || *r.Updates[0].PeakReservedGB != 6 {
		t.Errorf("update 1 peak reserved GiB = %v, want 6", r.Updates[0].PeakReservedGB)
	}
	if r.GPU == nil || r.GPU.Name != "NVIDIA H200" || r.GPU.Driver != "570.133.20" || *r.GPU.TotalGB != 140.4014 {
		t.Errorf("gpu = %+v", r.GPU)
	}
	if r.Optimizer == nil || r.Optimizer.Class != "torch.optim.adamw.AdamW" || r.Optimizer.States[0].Dtype != "float32" {
		t.Errorf("optimizer = %+v", r.Optimizer)
	}
	if r.Software["peft"] != "0.17.0" || r.StderrTail != "" || r.Estimate != nil {
		t.Errorf("software %v, stderr_tail %q, estimate %v", r.Software, r.StderrTail, r.Estimate)
	}
	if !r.StartedAt.Equal(fixedNow()) {
		t.Errorf("started_at = %v", r.StartedAt)
	}
}

// The JSON must leave unknown measurements out, not write them as 0 or null.
func TestReceiptJSONOmitsUnknown(t *testing.T) {
	r := runFake(t, "dependency", nil)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	// Keys with their quotes and colon: a bare "gpu" also matches a checkout
	// path such as /work/wt-gpuwire in the receipt's python field.
	for _, field := range []string{`"peak_reserved_bytes":`, `"peak_reserved_gb":`, `"timing":`, `"gpu":`, `"estimate":`, `"updates":[`} {
		if bytes.Contains(b, []byte(field)) {
			t.Errorf("receipt JSON has %s for a dependency_error: %s", field, b)
		}
	}
	if r.MissingModule != "torch" {
		t.Errorf("missing_module = %q", r.MissingModule)
	}
}

func TestRunPassesScriptAndConfig(t *testing.T) {
	copyDir := t.TempDir()
	t.Setenv("FAKEPY_COPY_DIR", copyDir)
	r := runFake(t, "copy-config", nil)
	if r.Status != StatusSuccess {
		t.Fatalf("status %s: %s", r.Status, r.Error)
	}
	script, err := os.ReadFile(filepath.Join(copyDir, "probe.py"))
	if err != nil || !bytes.Equal(script, probeScript) {
		t.Errorf("probe.py handed to Python differs from the embedded one (err %v)", err)
	}
	b, err := os.ReadFile(filepath.Join(copyDir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got ProbeConfig
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(loraConfig(), got); diff != "" {
		t.Errorf("config handed to the probe (-want +got):\n%s", diff)
	}
}

func TestRunTimeoutKeepsWhatProbeReported(t *testing.T) {
	r := runFake(t, "hang", func(o *Options) { o.Timeout = 300 * time.Millisecond })
	if r.Status != StatusRuntime || !strings.Contains(r.Error, "timed out after 300ms at stage forward") {
		t.Errorf("status %s, error %q; want runtime_error timed out at forward", r.Status, r.Error)
	}
	if r.CompletedUpdates != 1 || r.Measured.PeakReservedGB == nil || *r.Measured.PeakReservedGB != 2 {
		t.Errorf("completed %d, peak reserved %v GiB; want what the probe measured before SIGINT", r.CompletedUpdates, r.Measured.PeakReservedGB)
	}
}

func TestRunTimeoutKillsDeafProbe(t *testing.T) {
	start := time.Now()
	r := runFake(t, "deaf", func(o *Options) { o.Timeout = 200 * time.Millisecond; o.GracePeriod = 300 * time.Millisecond })
	if r.Status != StatusRuntime || !strings.Contains(r.Error, "timed out") || !strings.Contains(r.StderrTail, "stuck in a CUDA kernel") {
		t.Errorf("status %s, error %q, stderr_tail %q", r.Status, r.Error, r.StderrTail)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("Run took %v: the probe was not killed after its grace period", el)
	}
}

func TestRunInterrupted(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	r, err := Run(ctx, Options{Config: loraConfig(), Python: fakePython(t, "hang"), ReceiptPath: filepath.Join(dir, "r.json"), GracePeriod: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != StatusInterrupted || r.Signal != "" || !strings.Contains(r.Error, "interrupted at stage forward") || r.CompletedUpdates != 1 {
		t.Errorf("status %s, error %q, completed %d", r.Status, r.Error, r.CompletedUpdates)
	}
	if _, err := ReadReceipt(filepath.Join(dir, "r.json")); err != nil {
		t.Errorf("no receipt after interrupt: %v", err)
	}
}

func TestRunMissingPython(t *testing.T) {
	r := runFake(t, "success", func(o *Options) { o.Python = filepath.Join(t.TempDir(), "no-such-python") })
	if r.Status != StatusDependency || !strings.Contains(r.Error, "no-such-python") {
		t.Errorf("status %s, error %q; want dependency_error naming the interpreter", r.Status, r.Error)
	}
}

func TestRunPythonNotExecutable(t *testing.T) {
	py := filepath.Join(t.TempDir(), "python")
	if err := os.WriteFile(py, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runFake(t, "success", func(o *Options) { o.Python = py })
	if r.Status != StatusDependency || !strings.Contains(r.Error, "permission denied") {
		t.Errorf("status %s, error %q; want dependency_error, permission denied", r.Status, r.Error)
	}
}

func TestRunReceiptDirMissing(t *testing.T) {
	copyDir := t.TempDir()
	t.Setenv("FAKEPY_COPY_DIR", copyDir)
	path := filepath.Join(t.TempDir(), "no-such-dir", "r.json")
	_, err := Run(context.Background(), Options{Config: loraConfig(), Python: fakePython(t, "copy-config"), ReceiptPath: path})
	if err == nil || !strings.Contains(err.Error(), "no-such-dir") {
		t.Errorf("Run error = %v, want one naming the missing directory", err)
	}
	if ents, _ := os.ReadDir(copyDir); len(ents) != 0 {
		t.Errorf("the probe ran although its receipt could not be written: %v", ents)
	}
}

func TestRunBadConfigNeverStartsPython(t *testing.T) {
	r := runFake(t, "crash", func(o *Options) { o.Config.SeqLen = 0 })
	if r.Status != StatusConfigError || r.Error != "seq_len: bad value 0 (want > 0)" || r.StderrTail != "" {
		t.Errorf("status %s, error %q, stderr_tail %q", r.Status, r.Error, r.StderrTail)
	}
}

func TestRunRecordsEstimate(t *testing.T) {
	var seen ProbeConfig
	est := func(c ProbeConfig) (*EstimateRecord, error) {
		seen = c
		return &EstimateRecord{Estimator: "fake", Version: "9", Kind: "reserved", TotalBytes: 3 << 30,
			Components: []EstimateComponent{{Name: "weights", Bytes: 1 << 30}, {Name: "activations", Bytes: 2 << 30}}}, nil
	}
	r := runFake(t, "success", func(o *Options) { o.Estimator = est })
	if seen.Model != "Qwen/Qwen2.5-0.5B" {
		t.Errorf("estimator saw config %+v", seen)
	}
	want := &EstimateRecord{Estimator: "fake", Version: "9", Kind: "reserved", TotalBytes: 3 << 30, TotalGB: 3,
		Components: []EstimateComponent{{Name: "weights", Bytes: 1 << 30, GB: 1}, {Name: "activations", Bytes: 2 << 30, GB: 2}}}
	if diff := cmp.Diff(want, r.Estimate); diff != "" {
		t.Errorf("estimate (-want +got):\n%s", diff)
	}
	r = runFake(t, "success", func(o *Options) {
		o.Estimator = func(ProbeConfig) (*EstimateRecord, error) { return nil, errors.New("unknown architecture") }
	})
	if r.Estimate != nil || r.EstimateError != "unknown architecture" {
		t.Errorf("estimate %v, estimate_error %q", r.Estimate, r.EstimateError)
	}
}

func TestWriteReceiptAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.json")
	old := []byte("{\"old\": true}\n")
	if err := os.WriteFile(path, old, 0o644); err != nil {
		t.Fatal(err)
	}
	// A receipt that cannot be encoded (NaN) must leave the old file whole.
	nan := Receipt{SchemaVersion: 1, Status: StatusSuccess, DurationS: nanValue()}
	if err := WriteReceipt(path, nan); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("WriteReceipt(NaN) error = %v, want one naming %s", err, path)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, old) {
		t.Errorf("existing receipt clobbered: %q", b)
	}
	// A rename that fails (the target is a non-empty directory) leaves no temp file.
	target := filepath.Join(dir, "d")
	if err := os.MkdirAll(filepath.Join(target, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteReceipt(target, Receipt{SchemaVersion: 1, Status: StatusNotRun}); err == nil {
		t.Error("WriteReceipt over a directory succeeded")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Errorf("files left in %s: %v, want r.json and d", dir, ents)
	}
	// And a good write replaces the old receipt whole.
	if err := WriteReceipt(path, Receipt{SchemaVersion: 1, Status: StatusNotRun, Error: "x"}); err != nil {
		t.Fatal(err)
	}
	if r, err := ReadReceipt(path); err != nil || r.Error != "x" {
		t.Errorf("ReadReceipt = %+v, %v", r, err)
	}
}

func nanValue() float64 { z := 0.0; return z / z }

func TestReadReceiptRejects(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"version": `{"schema_version": 2, "status": "success"}`,
		"status":  `{"schema_version": 1, "status": "ok"}`,
		"json":    `{"schema_version": 1,`,
	} {
		p := filepath.Join(dir, name+".json")
		os.WriteFile(p, []byte(body), 0o644)
		if _, err := ReadReceipt(p); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: ReadReceipt error = %v, want one naming the file", name, err)
		}
	}
}

func TestValidateConfig(t *testing.T) {
	mod := func(f func(*ProbeConfig)) ProbeConfig { c := loraConfig(); f(&c); return c }
	tests := []struct {
		cfg  ProbeConfig
		want string
	}{
		{loraConfig(), ""},
		{mod(func(c *ProbeConfig) { c.Method = "full"; c.Rank = 0; c.Targets = nil }), ""},
		{mod(func(c *ProbeConfig) { c.Method = "qlora"; c.Quant = &Quant{Scheme: "nf4", DoubleQuant: true} }), ""},
		{mod(func(c *ProbeConfig) { c.Method = "dora" }), `method: bad value "dora"`},
		{mod(func(c *ProbeConfig) { c.Rank = 0 }), "rank: bad value 0"},
		{mod(func(c *ProbeConfig) { c.Targets = nil }), "targets: empty"},
		{mod(func(c *ProbeConfig) { c.Method = "qlora" }), "quant: qlora needs scheme nf4"},
		{mod(func(c *ProbeConfig) { c.Quant = &Quant{Scheme: "nf4"} }), `quant: set for method "lora"`},
		{mod(func(c *ProbeConfig) { c.Batch = -1 }), "batch: bad value -1"},
		{mod(func(c *ProbeConfig) { c.Optimizer = "adam" }), `optimizer: bad value "adam"`},
		{mod(func(c *ProbeConfig) { c.Model = "" }), "model: empty"},
	}
	for _, tt := range tests {
		err := ValidateConfig(tt.cfg)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("ValidateConfig(%+v) = %q, want %q", tt.cfg, got, tt.want)
		}
	}
}

func TestReceiptID(t *testing.T) {
	c := loraConfig()
	c.Model = "/data/configs/Llama 3.2_1B/config.json"
	got := receiptID(fixedNow(), c)
	if want := "bench-20261130T020000Z-llama-3.2-1b-lora-s1024-b2-"; !strings.HasPrefix(got, want) {
		t.Errorf("receiptID = %q, want prefix %q", got, want)
	}
	// Probes that differ only in precision must not share an id (it becomes the case id).
	c.Precision = "fp32"
	if other := receiptID(fixedNow(), c); other == got {
		t.Errorf("receiptID is %q for two configurations", got)
	}
}

// The real probe, run with this machine's python3: without torch it must
// leave a dependency_error receipt naming torch (CI has Python, no torch).
func TestRunRealProbeWithoutTorch(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on PATH")
	}
	if exec.Command(py, "-c", "import torch").Run() == nil {
		t.Skip("torch is installed: the probe would train")
	}
	dir := t.TempDir()
	r, err := Run(context.Background(), Options{Config: loraConfig(), Python: py, ReceiptPath: filepath.Join(dir, "r.json"), Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != StatusDependency || r.MissingModule != "torch" || r.Stage != "setup" || r.Software["python"] == "" {
		t.Errorf("status %s, missing %q, stage %q, software %v; want dependency_error on torch", r.Status, r.MissingModule, r.Stage, r.Software)
	}
	assertOnlyFile(t, dir, "r.json")
}

// The real probe against the fake torch/transformers/peft of
// testdata/fakemods: the probe's actual output must decode into a receipt and
// convert to a valid case (the Go/Python contract, checked without a GPU).
func TestRunRealProbeWithFakeTorch(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on PATH")
	}
	mods, err := filepath.Abs(filepath.Join("testdata", "fakemods"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PYTHONPATH", mods)
	t.Setenv("FAKE_TORCH_OOM", "")
	model := t.TempDir()
	if err := os.WriteFile(filepath.Join(model, "config.json"), []byte(`{"model_type": "qwen2", "vocab_size": 1000}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := loraConfig()
	cfg.Model, cfg.ModelID, cfg.Precision = model, "Qwen/Qwen2.5-0.5B", "bf16-mixed"
	dir := t.TempDir()
	r, err := Run(context.Background(), Options{Config: cfg, Python: py, ReceiptPath: filepath.Join(dir, "r.json"), Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != StatusSuccess || r.CompletedUpdates != 3 || len(r.Updates) != 3 {
		t.Fatalf("status %s, completed %d, %d records, error %q\n%s", r.Status, r.CompletedUpdates, len(r.Updates), r.Error, r.StderrTail)
	}
	m := r.Measured
	if m.PeakReservedBytes == nil || m.PeakReservedGB == nil || m.PeakAllocatedBytes == nil || *m.PeakReservedBytes < *m.PeakAllocatedBytes {
		t.Errorf("measured = %+v", m)
	}
	if r.Effective == nil || r.Effective.Autocast == nil || *r.Effective.Autocast != "bf16" || r.Effective.ModelType != "qwen2" {
		t.Errorf("effective = %+v", r.Effective)
	}
	if r.Optimizer == nil || r.Optimizer.Class != "torch.optim.AdamW" || r.Optimizer.StateGB == nil {
		t.Errorf("optimizer = %+v", r.Optimizer)
	}
	c, err := ToCase(r)
	if err != nil {
		t.Fatal(err)
	}
	if c.Model != "Qwen/Qwen2.5-0.5B" || *c.OptimizerStateDtype != "fp32" || *c.Arch != "qwen2" {
		t.Errorf("case = %+v", c)
	}

	t.Setenv("FAKE_TORCH_OOM", "forward:2")
	r, err = Run(context.Background(), Options{Config: cfg, Python: py, ReceiptPath: filepath.Join(dir, "r.json"), Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != StatusOOM || r.Stage != "forward" || r.CompletedUpdates != 1 || r.Measured.AtFailureAllocatedGB == nil {
		t.Errorf("status %s, stage %s, completed %d, at failure %v", r.Status, r.Stage, r.CompletedUpdates, r.Measured.AtFailureAllocatedGB)
	}
	assertOnlyFile(t, dir, "r.json")
}

// A receipt that cannot be written is found before the probe runs, not after
// it (when the measurement would be lost).
func TestRunReceiptNotWritable(t *testing.T) {
	isDir := filepath.Join(t.TempDir(), "r.json")
	if err := os.Mkdir(isDir, 0o755); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(t.TempDir(), "r.json")
	if err := os.Symlink(filepath.Join("gone", "r.json"), dangling); err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{"directory": isDir, "dangling symlink": dangling}
	if runtime.GOOS != "windows" && os.Geteuid() != 0 { // root writes into a read-only directory
		ro := t.TempDir()
		if err := os.Chmod(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(ro, 0o755) })
		paths["read-only directory"] = filepath.Join(ro, "r.json")
	}
	for name, path := range paths {
		t.Run(name, func(t *testing.T) {
			copyDir := t.TempDir()
			t.Setenv("FAKEPY_COPY_DIR", copyDir)
			_, err := Run(context.Background(), Options{Config: loraConfig(), Python: fakePython(t, "copy-config"), ReceiptPath: path})
			if err == nil || !strings.Contains(err.Error(), "cannot be written, so the probe was not started") {
				t.Errorf("Run error = %v, want a refusal before the probe", err)
			}
			if ents, _ := os.ReadDir(copyDir); len(ents) != 0 {
				t.Errorf("the probe ran although its receipt could not be written: %v", ents)
			}
		})
	}
}
