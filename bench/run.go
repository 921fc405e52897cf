package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/canifinetune/canifinetune/internal/atomicfile"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// probeScript is the Python probe, embedded so the binary needs no checkout.
//
//go:embed probe.py
var probeScript []byte

// resultPrefix marks the probe's result line on stdout (RESULT_PREFIX in probe.py).
const resultPrefix = "CANIFINETUNE_PROBE_RESULT "

// Options is one probe request and the dependencies Run needs.
type Options struct {
	Config ProbeConfig
	// Python is the interpreter to run (a path or a name looked up in PATH).
	Python string
	// ReceiptPath is where the receipt is written, atomically, whatever happens.
	ReceiptPath string
	// Timeout bounds the probe; 0 means no limit beyond ctx.
	Timeout time.Duration
	// GracePeriod is how long the probe has after SIGINT to report before its
	// process group is killed; 0 means 30 s. The probe gets SIGINT whatever
	// stopped the run (Ctrl-C, SIGTERM, the timeout): Python turns it into
	// KeyboardInterrupt and reports what it measured.
	GracePeriod time.Duration
	// Estimator, when set, makes the estimate recorded before the run.
	Estimator Estimator
	// Progress receives the probe's stderr as it runs; nil discards it.
	Progress io.Writer
	// ToolVersion is recorded in the receipt.
	ToolVersion string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// stderrTailBytes is how much of the probe's stderr a failed receipt keeps:
// enough for a Python traceback, small enough to read in a receipt.
const stderrTailBytes = 4096

// Run runs one probe and writes its receipt to opts.ReceiptPath. It returns the
// receipt whatever the probe's outcome (see Receipt.Status); the error is
// non-nil only when the receipt itself could not be written.
func Run(ctx context.Context, opts Options) (Receipt, error) {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	r := Receipt{
		SchemaVersion: SchemaVersion,
		Tool:          Tool{Name: "canifinetune", Version: opts.ToolVersion},
		Status:        StatusNotRun,
		StartedAt:     now().UTC(),
		Config:        opts.Config,
		Python:        opts.Python,
	}
	r.ID = receiptID(r.StartedAt, opts.Config)
	finish := func() (Receipt, error) {
		r.FinishedAt = now().UTC()
		r.DurationS = r.FinishedAt.Sub(r.StartedAt).Seconds()
		r.fillGB()
		return r, WriteReceipt(opts.ReceiptPath, r)
	}
	if opts.ReceiptPath == "" {
		return r, errors.New("bench: no receipt path")
	}
	// Fail before a probe that may take minutes, not after it, when its
	// receipt could not be written anyway: the directory must exist and take
	// a new file (the receipt is written beside it, then renamed).
	if fi, err := os.Stat(filepath.Dir(opts.ReceiptPath)); err != nil || !fi.IsDir() {
		return r, fmt.Errorf("bench: receipt %s: directory %s does not exist", opts.ReceiptPath, filepath.Dir(opts.ReceiptPath))
	}
	if err := atomicfile.CheckOutput(opts.ReceiptPath); err != nil {
		return r, fmt.Errorf("bench: receipt %s cannot be written, so the probe was not started: %w", opts.ReceiptPath, err)
	}
	if err := ValidateConfig(opts.Config); err != nil {
		r.Status, r.Stage, r.Error = StatusConfigError, "setup", err.Error()
		return finish()
	}
	if opts.Estimator != nil {
		est, err := opts.Estimator(opts.Config)
		switch {
		case err != nil:
			r.EstimateError = err.Error()
		case est != nil:
			r.Estimate = est
		}
	}
	if ctx.Err() != nil {
		r.Status, r.Signal = StatusInterrupted, signalOf(ctx)
		r.Error = "interrupted" + bySignal(r.Signal) + " before the probe started"
		return finish()
	}
	python := opts.Python
	if python == "" {
		python = "python3"
	}
	r.Python = python

	dir, err := os.MkdirTemp("", "canifinetune-bench-")
	if err != nil {
		r.Status, r.Error = StatusRuntime, fmt.Sprintf("create probe directory: %v", err)
		return finish()
	}
	defer os.RemoveAll(dir)
	script, cfgPath, resPath := filepath.Join(dir, "probe.py"), filepath.Join(dir, "config.json"), filepath.Join(dir, "result.json")
	cfgJSON, err := json.MarshalIndent(opts.Config, "", "  ")
	if err == nil {
		err = os.WriteFile(cfgPath, cfgJSON, 0o600)
	}
	if err == nil {
		err = os.WriteFile(script, probeScript, 0o600)
	}
	if err != nil {
		r.Status, r.Error = StatusRuntime, fmt.Sprintf("write probe files in %s: %v", dir, err)
		return finish()
	}

	runCtx := ctx
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	grace := opts.GracePeriod
	if grace == 0 {
		grace = 30 * time.Second
	}
	cmd := exec.CommandContext(runCtx, python, script, "--config", cfgPath, "--result", resPath)
	cmd.Dir = dir
	var stdout bytes.Buffer
	tail := &tailWriter{max: stderrTailBytes}
	cmd.Stdout = &stdout
	if opts.Progress != nil {
		cmd.Stderr = io.MultiWriter(tail, opts.Progress)
	} else {
		cmd.Stderr = tail
	}
	// On cancellation (Ctrl-C or timeout) the probe gets SIGINT, which Python
	// turns into KeyboardInterrupt: it reports what it measured so far. Only
	// after the grace period is its process group killed.
	setProcessGroup(cmd)
	cmd.Cancel = func() error { return interruptGroup(cmd) }
	cmd.WaitDelay = grace
	runErr := cmd.Run()
	killGroup(cmd) // a probe's children (nvidia-smi, dataloader workers) must not outlive it

	res, perr := readResult(resPath, stdout.Bytes())
	if cmd.Process == nil && runErr != nil && ctx.Err() == nil {
		// The interpreter did not start (missing, not executable): a dependency,
		// not a crash of the probe.
		r.Status, r.Stage = StatusDependency, "setup"
		r.Error = fmt.Sprintf("run the probe with Python %q: %v", python, runErr)
		return finish()
	}
	if perr == nil {
		r.merge(res)
	} else {
		r.Status, r.Stage = StatusRuntime, ""
		r.Error = fmt.Sprintf("probe gave no result (%v)", perr)
		if runErr != nil {
			r.Error = fmt.Sprintf("probe failed: %v; %s", runErr, r.Error)
		}
	}
	finished := runErr == nil && r.Status == StatusSuccess // a deadline that passed after a clean finish changes nothing
	switch {
	case finished:
	case errors.Is(runCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		r.Status = StatusRuntime
		r.Error = strings.TrimSpace(fmt.Sprintf("probe timed out after %v at stage %s; %s", opts.Timeout, orUnknown(r.Stage), r.Error))
	case ctx.Err() != nil:
		r.Status, r.Signal = StatusInterrupted, signalOf(ctx)
		r.Error = strings.TrimSpace(fmt.Sprintf("interrupted%s at stage %s; %s", bySignal(r.Signal), orUnknown(r.Stage), r.Error))
	}
	if r.Status != StatusSuccess && r.Status != StatusOOM && r.Status != StatusConfigError && r.Status != StatusDependency {
		r.StderrTail = tail.String()
	}
	return finish()
}

// Interrupted is the cause a caller gives when it cancels Run's context
// because a signal asked the program to stop (context.WithCancelCause): the
// receipt's status is then interrupted and its signal field names Signal.
type Interrupted struct {
	// Signal is the signal's conventional name: SIGINT, SIGTERM, …
	Signal string
}

func (e *Interrupted) Error() string { return "interrupted by " + e.Signal }

// signalOf is the signal that cancelled ctx, or "" when it was cancelled
// without an Interrupted cause.
func signalOf(ctx context.Context) string {
	var in *Interrupted
	if errors.As(context.Cause(ctx), &in) {
		return in.Signal
	}
	return ""
}

func bySignal(sig string) string {
	if sig == "" {
		return ""
	}
	return " by " + sig
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// probeResult is what probe.py reports: the receipt's measured half, bytes only.
type probeResult struct {
	ProbeSchema      int               `json:"probe_schema"`
	Status           Status            `json:"status"`
	Stage            string            `json:"stage"`
	Error            string            `json:"error"`
	ErrorType        string            `json:"error_type"`
	MissingModule    string            `json:"missing_module"`
	CompletedUpdates int               `json:"completed_updates"`
	Effective        *Effective        `json:"effective"`
	GPU              *GPU              `json:"gpu"`
	Software         map[string]string `json:"software"`
	Memory           Measured          `json:"memory"`
	Timing           *Timing           `json:"timing"`
	Updates          []UpdateRecord    `json:"updates"`
	Optimizer        *OptimizerRecord  `json:"optimizer"`
	Trace            string            `json:"trace"`
}

// readResult reads the probe's result from the file it wrote, or else from the
// last prefixed line of its stdout (the file is lost if the probe was killed
// between writing and renaming it; stdout may carry library chatter).
func readResult(path string, stdout []byte) (probeResult, error) {
	var fromFile error
	if b, err := os.ReadFile(path); err == nil {
		res, err := decodeResult(b)
		if err == nil {
			return res, nil
		}
		fromFile = fmt.Errorf("result file: %w", err)
	}
	var last []byte
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for sc.Scan() {
		if line := bytes.TrimSpace(sc.Bytes()); bytes.HasPrefix(line, []byte(resultPrefix)) {
			last = bytes.Clone(line[len(resultPrefix):])
		}
	}
	if last == nil {
		if fromFile != nil {
			return probeResult{}, fromFile
		}
		return probeResult{}, fmt.Errorf("no result file and no %q line on stdout (stdout: %q)", strings.TrimSpace(resultPrefix), clip(stdout, 200))
	}
	res, err := decodeResult(last)
	if err != nil {
		return probeResult{}, fmt.Errorf("result line on stdout: %w", err)
	}
	return res, nil
}

func decodeResult(b []byte) (probeResult, error) {
	var res probeResult
	if err := json.Unmarshal(b, &res); err != nil {
		return res, fmt.Errorf("decode %q: %w", clip(b, 200), err)
	}
	if !res.Status.Valid() {
		return res, fmt.Errorf("field status: bad value %q", res.Status)
	}
	if res.ProbeSchema != 1 {
		return res, fmt.Errorf("field probe_schema: bad value %d (this canifinetune reads 1)", res.ProbeSchema)
	}
	if res.CompletedUpdates < 0 || res.CompletedUpdates != len(res.Updates) {
		return res, fmt.Errorf("field completed_updates: bad value %d with %d update records", res.CompletedUpdates, len(res.Updates))
	}
	for _, p := range []*int64{res.Memory.PeakAllocatedBytes, res.Memory.PeakReservedBytes, res.Memory.PeakActiveBytes} {
		if p != nil && *p < 0 {
			return res, fmt.Errorf("field memory: negative peak %d", *p)
		}
	}
	return res, nil
}

func (r *Receipt) merge(p probeResult) {
	r.Status, r.Stage, r.Error, r.ErrorType, r.MissingModule = p.Status, p.Stage, p.Error, p.ErrorType, p.MissingModule
	r.CompletedUpdates = p.CompletedUpdates
	r.Effective, r.GPU, r.Software = p.Effective, p.GPU, p.Software
	r.Measured, r.Timing, r.Optimizer, r.Trace = p.Memory, p.Timing, p.Optimizer, p.Trace
	if len(p.Updates) > 0 {
		r.Updates = p.Updates
	}
}

func clip(b []byte, n int) string {
	s := string(b)
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	max int
	buf []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailWriter) String() string { return strings.ToValidUTF8(string(t.buf), "") }

// receiptID names a receipt uniquely enough to become a case id:
// bench-<UTC time>-<model>-<method>-s<seq>-b<batch>-<config hash>.
func receiptID(t time.Time, c ProbeConfig) string {
	name := c.Model
	if c.ModelID != "" {
		name = c.ModelID
	}
	model := strings.ToLower(filepath.Base(strings.TrimRight(name, "/")))
	if model == "config.json" {
		model = strings.ToLower(filepath.Base(filepath.Dir(c.Model)))
	}
	var b strings.Builder
	for _, r := range model {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	// The hash of the whole configuration tells apart probes that share model,
	// method and shape but differ elsewhere (precision, optimizer, …).
	cfg, _ := json.Marshal(c)
	sum := sha256.Sum256(cfg)
	return fmt.Sprintf("bench-%s-%s-%s-s%d-b%d-%x", t.Format("20060102T150405Z"), b.String(), c.Method, c.SeqLen, c.Batch, sum[:3])
}

// WriteReceipt writes r as indented JSON to path atomically: into a temporary
// file in the same directory, synced, then renamed over path. A reader never
// sees a partial receipt, and an existing receipt survives a failed write.
func WriteReceipt(path string, r Receipt) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode receipt %s: %w", path, err)
	}
	b = append(b, '\n')
	if err := atomicfile.WriteOutput(path, b, 0o644); err != nil {
		return fmt.Errorf("receipt: %w", err)
	}
	return nil
}

// ReadReceipt reads and checks a receipt file.
func ReadReceipt(path string) (Receipt, error) {
	var r Receipt
	b, err := os.ReadFile(path)
	if err != nil {
		return r, fmt.Errorf("read receipt: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("read receipt %s: %w", path, err)
	}
	if r.SchemaVersion != SchemaVersion {
		return r, fmt.Errorf("read receipt %s: field schema_version: bad value %d (this canifinetune reads %d)", path, r.SchemaVersion, SchemaVersion)
	}
	if !r.Status.Valid() {
		return r, fmt.Errorf("read receipt %s: field status: bad value %q", path, r.Status)
	}
	return r, nil
}
