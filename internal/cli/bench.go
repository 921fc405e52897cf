package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/canifinetune/canifinetune/bench"
	"github.com/canifinetune/canifinetune/estimate"
)

// benchEstimator makes the estimate a receipt records before its run, for
// the probe's CUDA device: the default estimator (bench_estimate.go). A
// variable so that a test can swap it.
var benchEstimator = probeEstimator

// BenchCmd runs a bounded training probe on this machine's GPU and writes a receipt.
type BenchCmd struct {
	Model string `arg:"" optional:"" help:"Hugging Face id or local model directory (with --random-init, a directory or config.json is enough). With --to-case: a receipt file."`

	ModelID      string `name:"model-id" placeholder:"ORG/NAME" help:"Hugging Face id to record when MODEL is a local directory."`
	RequestFlags `embed:""`
	Alpha        int           `help:"LoRA alpha (default 2×rank)."`
	Updates      int           `default:"3" help:"Optimizer updates to run."`
	Device       int           `default:"0" help:"CUDA device index."`
	RandomInit   bool          `help:"Build the model from its config.json with random weights (memory does not depend on weight values)."`
	Receipt      string        `placeholder:"FILE" help:"Receipt path (default canifinetune-bench-<UTC time>.json)."`
	Python       string        `default:"python3" help:"Python interpreter with torch, transformers and peft."`
	Timeout      time.Duration `default:"10m" help:"Stop the probe after this long (it still writes a receipt)."`
	Trace        string        `placeholder:"FILE" help:"Also record a torch.profiler chrome trace of the probed steps."`
	Sweep        string        `placeholder:"KEY=V1,V2,…" help:"Probe increasing values of batch, seq-len or rank; stop at the first OOM; report the largest that fits."`
	JSON         bool          `name:"json" help:"Print the receipt (or the sweep) as JSON."`
	ToCase       bool          `name:"to-case" help:"Print the receipt MODEL names as one measured-case JSON line (docs/measurements-schema.md) for validate and calibrate."`
	ToThroughput bool          `name:"to-throughput" help:"Print the receipt MODEL names as one measured-speed JSON line (docs/throughput-schema.md) for validate --throughput."`
}

// Help is the long help of `canifinetune bench --help`.
func (c *BenchCmd) Help() string {
	return `The probe (Python, embedded in this binary) trains the configuration with stock
transformers/PEFT/bitsandbytes on synthetic tokens of exactly seq-len × batch for
--updates optimizer updates and measures torch's peaks. A receipt is always
written, also on OOM, a crash, a missing module, a timeout or Ctrl-C.

Ctrl-C or SIGTERM (timeout, Slurm, docker stop) interrupts the probe: it gets
SIGINT and 30 s to report what it measured, then its process group is killed;
the receipt (status interrupted, naming the signal) is written and the
temporary directory removed. The receipt path is checked before the probe
starts: one that cannot be written is refused (exit 1) and nothing runs.

Exit codes: 0 the probe succeeded (--sweep: it found the largest setting that fits);
6 out of GPU memory (--sweep: even the smallest setting); 130 interrupted by
SIGINT, 143 by SIGTERM (128 + the signal, as a shell reports it); 1 any other
failure (the receipt says which); 2 bad flags.

The run is described with estimate's flags (--method, --quant, --grad-ckpt,
--precision, --optimizer, …), so a command line moves between the two. The
probe is one stack, a plain PyTorch loop over transformers and PEFT
(peft-accelerate): a value it cannot run (another --stack, --fused-ce,
--dynamic-padding, --compile, --grad-ckpt unsloth, --quant fp4, …) is refused
with exit 2. --targets attention and mlp name Llama-style modules
(q_proj,k_proj,v_proj,o_proj; gate_proj,up_proj,down_proj); other families
need module names or all-linear.

Receipts become measured cases for validate and calibrate with:
  canifinetune bench --to-case receipt.json >> cases.jsonl`
}

// Run runs the probe (or the sweep, or the conversion).
func (c *BenchCmd) Run(env *Env) error {
	c.RequestFlags.canonicalize()
	if c.ToCase && c.ToThroughput {
		return usageErrorf("canifinetune bench --to-case receipt.json", "bench: --to-case and --to-throughput convert the same receipt to different files; give one")
	}
	if c.ToCase {
		return c.toCase(env)
	}
	if c.ToThroughput {
		return c.toThroughput(env)
	}
	if c.Model == "" {
		return usageErrorf("canifinetune bench Qwen/Qwen2.5-0.5B --method lora --seq-len 1024", "bench: missing MODEL")
	}
	cfg, err := c.config()
	if err != nil {
		return err
	}
	receipt := c.Receipt
	if receipt == "" {
		receipt = "canifinetune-bench-" + time.Now().UTC().Format("20060102T150405Z") + ".json"
	}
	ctx, stop := interruptContext()
	defer stop()
	opts := bench.Options{
		Config: cfg, Python: c.Python, ReceiptPath: receipt, Timeout: c.Timeout,
		Estimator: benchEstimator(env, c.Device), ToolVersion: Version,
	}
	if env.IsTerminal {
		opts.Progress = env.Stderr
	}
	if c.Sweep != "" {
		return c.sweep(ctx, env, opts)
	}
	r, err := bench.Run(ctx, opts)
	if err != nil {
		return withCode(ExitError, err)
	}
	if c.JSON {
		if err := writeJSON(env.Stdout, r); err != nil {
			return withCode(ExitError, fmt.Errorf("write receipt JSON: %w", err))
		}
	} else {
		printReceipt(env.Stdout, r, receipt)
	}
	return statusErr(r, receipt)
}

// config turns the flags into the probe's configuration. The request flags
// are estimate's; a value the probe cannot run (it is one stack: a plain
// PyTorch loop over transformers and PEFT, fixed-length synthetic tokens) is
// a usage error naming the flag, never silently dropped.
func (c *BenchCmd) config() (bench.ProbeConfig, error) {
	f := c.RequestFlags
	// kong's enum has checked the value; an alias ("adamw") becomes the
	// optimizer it names, the name the probe knows.
	opt, _ := estimate.ParseOptimizer(string(flagOr(f.Optimizer, estimate.AdamWTorch)))
	cfg := bench.ProbeConfig{
		Model: c.Model, ModelID: c.ModelID, RandomInit: c.RandomInit, Method: string(f.Method),
		Precision: string(flagOr(f.Precision, estimate.BF16True)), Optimizer: string(opt),
		Attn: string(flagOr(f.Attn, estimate.SDPA)), Updates: c.Updates, Device: c.Device,
	}
	for _, n := range []struct {
		flag string
		v    int64
		dst  *int
	}{{"--seq-len", f.SeqLen, &cfg.SeqLen}, {"--batch", f.Batch, &cfg.Batch}, {"--grad-accum", f.GradAccum, &cfg.GradAccum}} {
		if n.v <= 0 || n.v > math.MaxInt32 {
			return cfg, usageErrorf("canifinetune bench --help", "bench: %s %d: want a positive integer up to %d", n.flag, n.v, math.MaxInt32)
		}
		*n.dst = int(n.v)
	}
	refuse := func(flag, value, runs string) error {
		if value != "" {
			flag += " " + value
		}
		return usageErrorf("canifinetune bench --help", "bench: %s: the probe runs %s", flag, runs)
	}
	for _, o := range []struct {
		flag, value string
		allowed     []string
	}{{"--precision", cfg.Precision, bench.Precisions}, {"--optimizer", cfg.Optimizer, bench.Optimizers}, {"--attn", cfg.Attn, bench.AttnImpls}} {
		if !slices.Contains(o.allowed, o.value) {
			return cfg, refuse(o.flag, o.value, strings.Join(o.allowed, ", "))
		}
	}
	switch ck := flagOr(f.GradCkpt, estimate.CkptNone); ck {
	case estimate.CkptNone:
	case estimate.CkptFull:
		cfg.GradCkpt = true
	default:
		return cfg, refuse("--grad-ckpt", string(ck), "none or full (transformers' non-reentrant checkpointing)")
	}
	switch {
	case f.Stack != nil && *f.Stack != bench.CaseFramework:
		return cfg, refuse("--stack", string(*f.Stack), "one stack: "+bench.CaseFramework+" (a plain PyTorch loop over transformers and PEFT)")
	case f.FusedCE != nil && *f.FusedCE != estimate.LossNone:
		return cfg, refuse("--fused-ce", string(*f.FusedCE), "transformers' own loss: none")
	case f.Dynamic:
		return cfg, refuse("--dynamic-padding", "", "fixed-length synthetic tokens of exactly --seq-len")
	case f.TargetLen != 0:
		return cfg, refuse("--target-len", strconv.FormatInt(f.TargetLen, 10), "a decoder-only model's --seq-len (the probe runs causal LMs)")
	case f.LongestFirst:
		return cfg, refuse("--longest-first", "", "fixed-length synthetic tokens of exactly --seq-len in every micro-batch")
	case f.SeqLenP50 != 0:
		return cfg, refuse("--seq-len-p50", strconv.FormatInt(f.SeqLenP50, 10), "fixed-length synthetic tokens of exactly --seq-len")
	case f.SeqLenFile != "":
		return cfg, refuse("--seq-len-file", f.SeqLenFile, "fixed-length synthetic tokens of exactly --seq-len")
	case f.SeqLenData != nil:
		return cfg, refuse("--seq-len-dataset", *f.SeqLenData, "fixed-length synthetic tokens of exactly --seq-len")
	case f.Compile:
		return cfg, refuse("--compile", "", "eager PyTorch, without torch.compile")
	case len(f.Kernels) > 0:
		return cfg, refuse("--kernels", joinKernels(f.Kernels), "eager PyTorch kernels")
	case f.Task != nil && *f.Task != estimate.TaskCausalLM:
		return cfg, refuse("--task", string(*f.Task), "causal-lm")
	case f.OptInBwd:
		return cfg, refuse("--optimizer-in-backward", "", "the optimizer stepping after the backward")
	case f.OptimDtype != nil:
		return cfg, refuse("--optimizer-state-dtype", string(*f.OptimDtype), "the optimizer's own state dtype (the parameters'); the receipt records what was allocated")
	case len(f.Extra) > 0:
		return cfg, refuse("--extra-trainable", strings.Join(f.Extra, ","), "adapters only")
	case f.Dropout != nil && *f.Dropout != 0:
		return cfg, refuse("--lora-dropout", strconv.FormatFloat(*f.Dropout, 'g', -1, 64), "lora_dropout 0")
	}
	if f.Method != "full" {
		rank := int64(16)
		if f.Rank != nil {
			rank = *f.Rank
		}
		if rank <= 0 || rank > math.MaxInt32 {
			return cfg, usageErrorf("--rank 16", "bench: --rank %d: a LoRA rank is a positive integer", rank)
		}
		cfg.Rank, cfg.Alpha, cfg.Targets = int(rank), c.Alpha, bench.PEFTTargets(f.Targets)
	}
	if f.Method == estimate.QLoRA {
		switch q := flagOr(f.Quant, estimate.NF4DQ); q {
		case estimate.NF4DQ:
			cfg.Quant = &bench.Quant{Scheme: "nf4", DoubleQuant: true}
		case estimate.NF4:
			cfg.Quant = &bench.Quant{Scheme: "nf4"}
		default:
			return cfg, refuse("--quant", string(q), "nf4 or nf4-dq (bitsandbytes 4-bit NF4)")
		}
	} else if f.Quant != nil {
		return cfg, usageErrorf("--method qlora --quant "+string(*f.Quant), "bench: --quant %s: only --method qlora quantizes the base model", *f.Quant)
	}
	// The probe runs in a temporary directory: a local model (bench ./my-model)
	// and the trace are handed to it as absolute paths. A name that is not a
	// local path is a Hub id and passes unchanged, as in modelsource.Resolve.
	if _, err := os.Stat(c.Model); err == nil && !filepath.IsAbs(c.Model) {
		if abs, err := filepath.Abs(c.Model); err == nil {
			cfg.Model = abs
		}
	}
	if c.Trace != "" {
		if abs, err := filepath.Abs(c.Trace); err == nil {
			cfg.Trace = abs
		}
	}
	if err := bench.ValidateConfig(cfg); err != nil {
		return cfg, usageErrorf("canifinetune bench --help", "bench: %v", err)
	}
	return cfg, nil
}

// interruptContext is cancelled, with a bench.Interrupted cause naming the
// signal, on SIGINT (Ctrl-C) or SIGTERM (timeout, Slurm, docker stop), so
// that bench.Run interrupts the probe's process group, kills it after the
// grace period, writes the receipt and removes its temporary directory
// instead of dying with the probe left running. Later signals are caught
// too, until stop: the receipt is written whatever arrives meanwhile. A
// signal the process was started to ignore (a background job's SIGINT)
// stays ignored.
func interruptContext() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	for _, s := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		if !signal.Ignored(s) {
			signal.Notify(sigs, s)
		}
	}
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			cancel(&bench.Interrupted{Signal: signalName(s)})
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}

func signalName(s os.Signal) string {
	switch s {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// statusErr maps a receipt's status to the exit code: 0 success, ExitOOM for
// an OOM, ExitInterrupted or ExitTerminated for a signal, ExitError for
// everything else.
func statusErr(r bench.Receipt, path string) error {
	switch r.Status {
	case bench.StatusSuccess:
		return nil
	case bench.StatusOOM:
		return withCode(ExitOOM, fmt.Errorf("bench: out of memory at stage %s (receipt %s)", r.Stage, path))
	case bench.StatusInterrupted:
		code := ExitInterrupted
		if r.Signal == "SIGTERM" {
			code = ExitTerminated
		}
		return withCode(code, fmt.Errorf("bench: %s (receipt %s)", firstLine(r.Error), path))
	}
	msg := firstLine(r.Error)
	if r.MissingModule != "" {
		msg = fmt.Sprintf("missing Python module %q: %s", r.MissingModule, msg)
	}
	return withCode(ExitError, fmt.Errorf("bench: %s: %s (receipt %s)", r.Status, msg, path))
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// sweepKeys are the settings --sweep can vary, with how each sets a config.
var sweepKeys = map[string]func(*bench.ProbeConfig, int){
	"batch":   func(c *bench.ProbeConfig, v int) { c.Batch = v },
	"seq-len": func(c *bench.ProbeConfig, v int) { c.SeqLen = v },
	"rank":    func(c *bench.ProbeConfig, v int) { c.Rank = v },
}

// parseSweep parses KEY=V1,V2,… into the key and its values, ascending and unique.
func parseSweep(s string) (string, []int, error) {
	key, list, ok := strings.Cut(s, "=")
	key = strings.ReplaceAll(strings.TrimSpace(key), "_", "-")
	if !ok || sweepKeys[key] == nil {
		return "", nil, fmt.Errorf("--sweep %q: want KEY=V1,V2,… with KEY batch, seq-len or rank", s)
	}
	seen := map[int]bool{}
	var vals []int
	for _, f := range strings.Split(list, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v <= 0 {
			return "", nil, fmt.Errorf("--sweep %q: bad value %q (want integers > 0)", s, f)
		}
		if !seen[v] {
			seen[v] = true
			vals = append(vals, v)
		}
	}
	sort.Ints(vals)
	return key, vals, nil
}

// sweepResult is the --json output of a sweep.
type sweepResult struct {
	Key        string          `json:"key"`
	Values     []int           `json:"values"`
	LargestFit *int            `json:"largest_fit"`
	Receipts   []string        `json:"receipts"`
	Results    []bench.Receipt `json:"results"`
}

func (c *BenchCmd) sweep(ctx context.Context, env *Env, base bench.Options) error {
	key, vals, err := parseSweep(c.Sweep)
	if err != nil {
		return usageErrorf("canifinetune bench MODEL --sweep batch=1,2,4,8", "bench: %v", err)
	}
	if key == "rank" && base.Config.Method == "full" {
		return usageErrorf("canifinetune bench MODEL --method lora --sweep rank=8,16,32", "bench: --sweep rank needs --method lora or qlora")
	}
	res := sweepResult{Key: key, Values: vals}
	stem := strings.TrimSuffix(base.ReceiptPath, ".json")
	var last bench.Receipt
	var lastPath string
	for _, v := range vals {
		opts := base
		sweepKeys[key](&opts.Config, v)
		opts.ReceiptPath = fmt.Sprintf("%s-%s%d.json", stem, key, v)
		if t := opts.Config.Trace; t != "" {
			// One trace per probe: each would overwrite the last.
			ext := filepath.Ext(t)
			opts.Config.Trace = fmt.Sprintf("%s-%s%d%s", strings.TrimSuffix(t, ext), key, v, ext)
		}
		r, err := bench.Run(ctx, opts)
		if err != nil {
			return withCode(ExitError, err)
		}
		res.Receipts = append(res.Receipts, opts.ReceiptPath)
		res.Results = append(res.Results, r)
		last, lastPath = r, opts.ReceiptPath
		if !c.JSON {
			fmt.Fprintf(env.Stdout, "%s=%d\t%s\t%s\t%s\n", key, v, r.Status, peakText(r), opts.ReceiptPath)
		}
		if r.Status != bench.StatusSuccess {
			break // a larger setting will not fit either; other failures need the user
		}
		fit := v
		res.LargestFit = &fit
	}
	if c.JSON {
		if err := writeJSON(env.Stdout, res); err != nil {
			return withCode(ExitError, fmt.Errorf("write sweep JSON: %w", err))
		}
	} else if res.LargestFit != nil {
		fmt.Fprintf(env.Stdout, "largest %s that fits, measured: %d\n", key, *res.LargestFit)
	} else {
		fmt.Fprintf(env.Stdout, "no %s tried fits\n", key)
	}
	switch {
	case last.Status == bench.StatusSuccess, last.Status == bench.StatusOOM && res.LargestFit != nil:
		return nil
	default:
		return statusErr(last, lastPath)
	}
}

func peakText(r bench.Receipt) string {
	if g := r.Measured.PeakReservedGB; g != nil && r.Status == bench.StatusSuccess {
		return fmt.Sprintf("peak reserved %.2f GiB", *g)
	}
	if r.Status == bench.StatusOOM {
		return "out of memory at " + r.Stage
	}
	return "-"
}

// printReceipt writes the human summary of a receipt.
func printReceipt(w io.Writer, r bench.Receipt, path string) {
	c := r.Config
	what := c.Method
	if c.Method != "full" {
		what = fmt.Sprintf("%s r%d", c.Method, c.Rank)
	}
	fmt.Fprintf(w, "bench: %s — %d/%d updates of %s (%s, seq %d × batch %d, %s, %s)\n",
		r.Status, r.CompletedUpdates, c.Updates, c.Model, what, c.SeqLen, c.Batch, c.Precision, c.Optimizer)
	if r.Status != bench.StatusSuccess {
		fmt.Fprintf(w, "  stage          %s\n", orDash(r.Stage))
		if e := firstLine(r.Error); e != "" {
			fmt.Fprintf(w, "  error          %s\n", e)
		}
	}
	m := r.Measured
	row := func(name string, gb *float64, what string) {
		if gb != nil {
			fmt.Fprintf(w, "  %-14s %7.2f GiB  %s\n", name, *gb, what)
		}
	}
	if r.Status == bench.StatusOOM {
		fmt.Fprintln(w, "  (peaks below cover only what ran before the OOM: a lower bound)")
	}
	row("peak reserved", m.PeakReservedGB, "max_memory_reserved")
	row("peak allocated", m.PeakAllocatedGB, "max_memory_allocated")
	row("peak active", m.PeakActiveGB, "active_bytes.all.peak")
	if r.GPU != nil && r.GPU.TotalGB != nil {
		row("device total", r.GPU.TotalGB, r.GPU.Name)
	}
	if t := r.Timing; t != nil && t.MeanStepS != nil {
		tps := ""
		if t.TokensPerS != nil {
			tps = fmt.Sprintf(", %.0f tokens/s", *t.TokensPerS)
		}
		fmt.Fprintf(w, "  %-14s %7.3f s%s\n", "step", *t.MeanStepS, tps)
	}
	if o := r.Optimizer; o != nil {
		var st []string
		for _, s := range o.States {
			st = append(st, fmt.Sprintf("%s %.1f MiB in %d tensors", s.Dtype, float64(s.Bytes)/(1<<20), s.Tensors))
		}
		fmt.Fprintf(w, "  %-14s %s (%s)\n", "optimizer", o.Class, strings.Join(st, ", "))
	}
	if e := r.Estimate; e != nil {
		fmt.Fprintf(w, "  %-14s %7.2f GiB  %s %s, %s\n", "estimate", e.TotalGB, e.Estimator, e.Version, e.Kind)
	}
	fmt.Fprintf(w, "receipt: %s\n", path)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (c *BenchCmd) toCase(env *Env) error {
	return c.convert(env, "--to-case", "cases.jsonl", "case", "only success and oom receipts measured a peak",
		func(r bench.Receipt) (any, error) { return bench.ToCase(r) })
}

func (c *BenchCmd) toThroughput(env *Env) error {
	return c.convert(env, "--to-throughput", "throughput.jsonl", "speed case", "only success receipts with a timed update measured a speed",
		func(r bench.Receipt) (any, error) { return bench.ToThroughput(r) })
}

// convert prints the receipt MODEL names as one JSON line of what conv
// makes of it (flag names the conversion, file the file it is appended to,
// what the line, and why what a receipt without one lacks).
func (c *BenchCmd) convert(env *Env, flag, file, what, why string, conv func(bench.Receipt) (any, error)) error {
	if c.Model == "" {
		return usageErrorf("canifinetune bench "+flag+" receipt.json >> "+file, "bench %s: missing the receipt file", flag)
	}
	r, err := bench.ReadReceipt(c.Model)
	if err != nil {
		return withCode(ExitError, err)
	}
	v, err := conv(r)
	if err != nil {
		if errors.Is(err, bench.ErrNotACase) {
			return withCode(ExitError, fmt.Errorf("%s: %w (%s)", c.Model, err, why))
		}
		return withCode(ExitError, fmt.Errorf("%s: %w", c.Model, err))
	}
	b, err := json.Marshal(v)
	if err != nil {
		return withCode(ExitError, fmt.Errorf("encode %s: %w", what, err))
	}
	_, err = fmt.Fprintf(env.Stdout, "%s\n", b)
	return err
}

func joinKernels(ks []estimate.Kernel) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ",")
}
