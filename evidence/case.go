// Package evidence reads measured fine-tuning memory cases (the JSON Lines format
// of docs/measurements-schema.md), scores estimators against them and fits the
// default estimator's coefficients on a development cohort. It is pure: callers
// hand it readers and get plain structs back.
//
// It refuses a case whose required fields are missing or out of range, naming
// the line, field and value. A field the source does not settle is nil — never
// a guess, and a missing measurement is never treated as zero.
package evidence

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/internal/bytesize"
)

// Case is one measured training run: the configuration that produced a peak
// GPU-memory figure, and that figure. Field names and meanings: docs/measurements-schema.md.
type Case struct {
	ID     string `json:"id"`
	Source string `json:"source"`
	Trust  string `json:"trust"`
	Model  string `json:"model"`
	// VocabSize is the vocabulary size where the model's config.json lacks
	// one (or the run resized the embeddings); nil: the config's.
	VocabSize *int `json:"vocab_size,omitempty"`
	// Task is the head the run trained through (estimate.Tasks); nil: the
	// model kind's default.
	Task                *string  `json:"task,omitempty"`
	Arch                *string  `json:"arch"`
	Method              string   `json:"method"`
	Precision           string   `json:"precision"`
	Quant               *Quant   `json:"quant"`
	LoRA                *LoRA    `json:"lora"`
	SeqLen              *int     `json:"seq_len"`
	SeqLenKind          string   `json:"seq_len_kind"`
	Batch               *int     `json:"batch"`
	GradAccum           *int     `json:"grad_accum"`
	GradCkpt            *string  `json:"grad_ckpt"`
	Optimizer           *string  `json:"optimizer"`
	OptimizerStateDtype *string  `json:"optimizer_state_dtype"`
	Attn                *string  `json:"attn"`
	FusedCE             *string  `json:"fused_ce"`
	OtherKernels        []string `json:"other_kernels"`
	Framework           string   `json:"framework"`
	GPU                 GPU      `json:"gpu"`
	Sharding            Sharding `json:"sharding"`
	Measured            Measured `json:"measured"`
	Notes               string   `json:"notes"`
	// Simulated marks a row computed by the fake-tensor oracle (oracle/),
	// not measured on a GPU: the training code ran on tensors without
	// storage and Measured is its peak of live tensor bytes. Such rows have
	// ids starting "oracle-". Fit and CrossValidate leave them out, so
	// published measurements alone set the fitted coefficients; validate
	// scores them like any other row.
	Simulated bool `json:"simulated,omitempty"`
	// SeqLenDist is what the source states about the sample lengths when
	// seq_len is only their bound (seq_len_kind max or padded-to-longest);
	// nil when it states nothing. Such a case is estimated over the
	// distribution: the peak at the longest batch, the reserved level by
	// replaying its batch shapes through the caching-allocator model.
	SeqLenDist *SeqLenDist `json:"seq_len_dist,omitempty"`
	// LongestFirst is true when the run's first micro-batch holds its
	// longest sample and the later ones are shorter (lit-gpt's 2023
	// finetune scripts); nil when the case does not say. Rows of the
	// shared cohort, kept byte for byte, say it in their notes
	// (statedLengthsOf).
	LongestFirst *bool `json:"longest_first,omitempty"`
	// StepPeaks is true when the measured active or allocated figure is
	// the peak of one logged step, not of the run: the framework reset the
	// peak statistics each time it logged them (torchtune's
	// get_memory_stats, every log_every_n_steps). Under dynamic padding
	// such a figure is a typical step's, so the case is scored at the
	// median of the longest of the step's batch × grad_accum samples
	// (estimate.LengthDist.LongestOf); a reserved or process figure, which the cache
	// only grows, is still the run's. nil when the case does not
	// say (rows of the shared cohort say it in their notes).
	StepPeaks *bool `json:"step_peaks,omitempty"`
	// SamplesSeen is how many training samples the measured run drew, when
	// its source states how long it ran (steps × batch × grad_accum × data-
	// parallel ranks; a notebook's max_steps, say). Under dynamic padding
	// the run's longest batch is then the longest of those samples, not the
	// dataset's longest: with a seq_len_dist the case is scored at the
	// median of the longest of a rank's share of them (samples_seen ÷
	// gpu.count; estimate.LengthDist.LongestOf).
	// nil: the run saw the whole distribution.
	SamplesSeen *int `json:"samples_seen,omitempty"`
	// EagerLoss is true when a compiled run's loss function ran eager
	// (torchtitan from 2024-12-18 to 2025-04-02 compiled only its
	// blocks); absent: the framework's default.
	EagerLoss *bool `json:"eager_loss,omitempty"`
}

// SeqLenDist is a case's sample-length distribution, in tokens, as its
// source states it: a median, or a mean and standard deviation, with the
// range when known, or the name of a dataset whose measured histogram the
// project keeps (Histogram). OverMax says what the trainer does with
// samples longer than seq_len: "drop" (deleted or filtered) or "truncate"
// (clipped).
type SeqLenDist struct {
	// Histogram names a length histogram kept in evidence/lengths
	// (Histograms); used before the figures below when set.
	Histogram string   `json:"histogram,omitempty"`
	P50       *float64 `json:"p50,omitempty"`
	Mean      *float64 `json:"mean,omitempty"`
	Std       *float64 `json:"std,omitempty"`
	Min       *int     `json:"min,omitempty"`
	Max       *int     `json:"max,omitempty"`
	OverMax   string   `json:"over_max,omitempty"`
	// Source says where the figures come from (a dataset card, the
	// source's own statistics).
	Source string `json:"source,omitempty"`
}

// Quant is the quantization of a frozen base model.
type Quant struct {
	Scheme       string  `json:"scheme"`
	DoubleQuant  *bool   `json:"double_quant"`
	ComputeDtype *string `json:"compute_dtype"`
	StorageDtype *string `json:"storage_dtype"`
}

// LoRA is the adapter configuration of a lora/qlora case.
type LoRA struct {
	Rank           int      `json:"rank"`
	Alpha          *int     `json:"alpha"`
	Targets        []string `json:"targets"`
	ExtraTrainable []string `json:"extra_trainable"`
	// Dropout is the adapters' dropout probability when the source states
	// it (null: the framework's default); above 0 each adapted module
	// keeps a dropout mask and output for the backward.
	Dropout *float64 `json:"dropout,omitempty"`
}

// GPU is the hardware a case ran on; figures are per GPU.
type GPU struct {
	Name    *string  `json:"name"`
	Count   *int     `json:"count"`
	VRAMGiB *float64 `json:"vram_gib"`
}

// Sharding is how training state was spread over GPUs.
type Sharding struct {
	Strategy   string `json:"strategy"`
	CPUOffload string `json:"cpu_offload"`
}

// Measured is the peak-memory figure of a case and its kind.
type Measured struct {
	Kind     string   `json:"kind"`
	GiB      *float64 `json:"gib"`
	OOM      bool     `json:"oom"`
	Original string   `json:"original"`
}

// Kinds of measurement, smallest to largest (docs/measurements-schema.md).
const (
	KindAllocated = "allocated" // torch.cuda.max_memory_allocated
	KindActive    = "active"    // active_bytes.all.peak
	KindReserved  = "reserved"  // torch.cuda.max_memory_reserved
	KindProcess   = "process"   // nvidia-smi / NVML: reserved + CUDA context and other allocations
)

// MaxVocab bounds a case's vocab_size: far above any tokenizer, low enough
// that tokens × vocabulary × bytes cannot wrap.
const MaxVocab = 1 << 24

// ErrInvalidCase is wrapped by every validation error of ReadCases.
var ErrInvalidCase = errors.New("invalid case")

var (
	validKinds = set(KindAllocated, KindActive, KindReserved, KindProcess)
	validTrust = set("high", "medium", "low")
)

// unknownChoice checks a request option of a case against estimate's table
// of that option: "" when the table has v, else the value and the list of
// what the table holds.
func unknownChoice[T ~string](parse func(string) (T, error), v string) string {
	var ue *estimate.UnknownValueError
	if _, err := parse(v); errors.As(err, &ue) {
		return fmt.Sprintf("%q (want one of %s)", v, strings.Join(ue.Valid, ", "))
	}
	return ""
}

func set(xs ...string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}

// maxCaseLine bounds one line of a cases file: a case is a few KiB, and the
// bound keeps a file without newlines from growing the buffer without end.
const maxCaseLine = 16 << 20

// ReadCases reads JSON Lines cases from r. name is used in error messages
// (usually the file name). Blank lines are skipped. The first invalid line stops
// the read with an error that names the file, line, case id, field and value.
func ReadCases(r io.Reader, name string) ([]Case, error) {
	return readJSONLines(r, name, ErrInvalidCase, false, func(c *Case) (string, error) { return c.ID, c.Validate() })
}

// readJSONLines reads one T a line from r, the loop ReadCases and
// ReadThroughput share. Blank lines are skipped; a line that does not
// decode, holds a second value, fails check or repeats an id stops the
// read with an error naming name, the line and, but for check's own
// errors (which wrap it themselves), sentinel. strict refuses fields T
// does not have. check returns the row's id and its validation error.
func readJSONLines[T any](r io.Reader, name string, sentinel error, strict bool, check func(*T) (string, error)) ([]T, error) {
	var rows []T
	seen := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxCaseLine)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var row T
		dec := json.NewDecoder(bytes.NewReader(b))
		if strict {
			dec.DisallowUnknownFields()
		}
		if err := dec.Decode(&row); err != nil {
			return nil, fmt.Errorf("%s:%d: %w: %v", name, line, sentinel, err)
		}
		// One case a line: a second value on the same line was once
		// dropped without a word.
		if off := dec.InputOffset(); dec.More() || int(off) < len(b) && len(bytes.TrimSpace(b[off:])) > 0 {
			return nil, fmt.Errorf("%s:%d: %w: more than one JSON value on the line (JSON Lines holds one case a line)", name, line, sentinel)
		}
		id, err := check(&row)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		if prev, ok := seen[id]; ok {
			return nil, fmt.Errorf("%s:%d: %w: id %q already used on line %d", name, line, sentinel, id, prev)
		}
		seen[id] = line
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s:%d: %w: line longer than %d MiB", name, line+1, sentinel, maxCaseLine>>20)
		}
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return rows, nil
}

// Validate checks the fields every consumer relies on. Numbers are held to
// the bounds estimate.Request.Normalize applies to the same fields (a rank of
// 2^40 scored −914,358,268 GiB and let calibrate write a file its own
// loader refuses), and a measured figure is a finite size of at least a MiB,
// so that an error percentage against it is a finite number.
func (c *Case) Validate() error {
	f := fieldCheck{ErrInvalidCase, c.ID}
	bad, outOf, intIn := f.bad, f.outOf, f.intIn
	var method, precision, strategy, offload string
	method = unknownChoice(estimate.ParseMethod, c.Method)
	precision = unknownChoice(estimate.ParsePrecision, c.Precision)
	if c.Sharding.Strategy != "" {
		strategy = unknownChoice(estimate.ParseStrategy, c.Sharding.Strategy)
	}
	if c.Sharding.CPUOffload != "" {
		offload = unknownChoice(estimate.ParseOffload, c.Sharding.CPUOffload)
	}
	switch {
	case c.ID == "":
		return bad("id", `""`)
	case c.Model == "":
		return bad("model", `""`)
	case method != "":
		return bad("method", method)
	case precision != "":
		return bad("precision", precision)
	case !validKinds[c.Measured.Kind]:
		return bad("measured.kind", fmt.Sprintf("%q (want allocated, active, reserved or process)", c.Measured.Kind))
	case c.Trust != "" && !validTrust[c.Trust]:
		return bad("trust", fmt.Sprintf("%q", c.Trust))
	case strategy != "":
		return bad("sharding.strategy", strategy)
	case c.Task != nil && unknownChoice(estimate.ParseTask, *c.Task) != "":
		return bad("task", unknownChoice(estimate.ParseTask, *c.Task))
	case offload != "":
		return bad("sharding.cpu_offload", offload)
	case c.Measured.OOM && c.Measured.GiB != nil:
		return bad("measured.gib", fmt.Sprintf("%v with oom=true (an OOM has no exact peak)", *c.Measured.GiB))
	case !c.Measured.OOM && c.Measured.GiB == nil:
		return bad("measured.gib", "null without oom=true")
	case (c.Method == "lora" || c.Method == "qlora") && c.LoRA == nil:
		return bad("lora", "null for a "+c.Method+" case")
	case c.Method == "full" && c.LoRA != nil:
		return bad("lora", "set for a full case (a full fine-tune has no adapters)")
	}
	if g := c.Measured.GiB; g != nil {
		if _, err := estimate.GiBBytes("measured.gib", *g); err != nil {
			return outOf("measured.gib", *g, "a size in GiB from %g to %d", bytesize.InGiB(estimate.MinGPUMemory), estimate.MaxGPUMemory/estimate.GiB)
		}
	}
	if g := c.GPU.VRAMGiB; g != nil {
		if _, err := estimate.GiBBytes("gpu.vram_gib", *g); err != nil {
			return outOf("gpu.vram_gib", *g, "a size in GiB from %g to %d", bytesize.InGiB(estimate.MinGPUMemory), estimate.MaxGPUMemory/estimate.GiB)
		}
	}
	if err := f.runCounts(c.SeqLen, c.Batch, c.GradAccum, c.GPU.Count); err != nil {
		return err
	}
	if d := c.SeqLenDist; d != nil {
		if _, err := d.Lengths(c.SeqLen); err != nil {
			return bad("seq_len_dist", err.Error())
		}
	}
	if err := f.microBatch(c.SeqLen, c.Batch); err != nil {
		return err
	}
	if err := intIn("vocab_size", c.VocabSize, 1, MaxVocab); err != nil {
		return err
	}
	if n := c.SamplesSeen; n != nil {
		// A run draws at least one micro-batch a rank.
		lo := int64(1)
		if c.Batch != nil {
			lo = int64(*c.Batch)
		}
		if c.GPU.Count != nil {
			lo *= int64(max(1, *c.GPU.Count))
		}
		if err := intIn("samples_seen", n, lo, math.MaxInt32); err != nil {
			return err
		}
		if c.SeqLenKind != "max" && c.SeqLenKind != "padded-to-longest" {
			// Only batches padded to their own longest sample depend on
			// which samples a run drew.
			return outOf("samples_seen", *n, "absent unless seq_len_kind is max or padded-to-longest (it is %q)", c.SeqLenKind)
		}
	}
	if c.EagerLoss != nil && *c.EagerLoss && (c.Framework != "torchtitan" || !slices.Contains(c.OtherKernels, kernelCompile)) {
		// An eager loss is a statement about a compiled torchtitan run.
		return outOf("eager_loss", true, "absent or false outside a compiled torchtitan run (framework torchtitan, other_kernels with %s)", kernelCompile)
	}
	if l := c.LoRA; l != nil {
		rank := l.Rank
		if err := intIn("lora.rank", &rank, 1, estimate.MaxLoRARank); err != nil {
			return err
		}
		// PEFT scales the update by alpha / rank; alpha does not change the
		// memory, but a non-positive or absurd one is a transcription error.
		if err := intIn("lora.alpha", l.Alpha, 1, estimate.MaxLoRARank); err != nil {
			return err
		}
		if d := l.Dropout; d != nil && !(*d >= 0 && *d < 1) {
			return outOf("lora.dropout", *d, "a probability in [0, 1)")
		}
	}
	return nil
}

// fieldCheck builds the field errors of one row, wrapping sentinel and
// naming the row's id, so that Case.Validate and ThroughputCase.Validate
// word their shared checks the same way.
type fieldCheck struct {
	sentinel error
	id       string
}

func (f fieldCheck) bad(field string, v any) error {
	return fmt.Errorf("%w: case %q: field %s: bad value %v", f.sentinel, f.id, field, v)
}

func (f fieldCheck) outOf(field string, v any, want string, args ...any) error {
	return f.bad(field, fmt.Sprintf("%v (want %s)", v, fmt.Sprintf(want, args...)))
}

// intIn checks an optional integer against lo..hi; nil passes.
func (f fieldCheck) intIn(field string, v *int, lo, hi int64) error {
	if v != nil && (int64(*v) < lo || int64(*v) > hi) {
		return f.outOf(field, *v, "an integer in %d..%d", lo, hi)
	}
	return nil
}

// runCounts holds a row's counts to the bounds estimate.Request.Normalize
// applies to the same fields.
func (f fieldCheck) runCounts(seqLen, batch, gradAccum, gpus *int) error {
	for _, c := range []struct {
		name   string
		v      *int
		lo, hi int64
	}{
		{"seq_len", seqLen, 1, estimate.MaxSeqLen},
		{"batch", batch, 1, estimate.MaxBatch},
		{"grad_accum", gradAccum, 1, estimate.MaxGradAccum},
		{"gpu.count", gpus, 1, estimate.MaxGPUs},
	} {
		if err := f.intIn(c.name, c.v, c.lo, c.hi); err != nil {
			return err
		}
	}
	return nil
}

// microBatch bounds the tokens of one micro-batch as estimate does.
func (f fieldCheck) microBatch(seqLen, batch *int) error {
	if seqLen != nil && batch != nil && int64(*seqLen)*int64(*batch) > estimate.MaxTokens {
		return f.outOf("seq_len × batch", fmt.Sprintf("%d × %d", *seqLen, *batch), "at most %d tokens per micro-batch", estimate.MaxTokens)
	}
	return nil
}
