package evidence

import (
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/canifinetune/canifinetune/estimate"
)

// ThroughputCase is one measured training speed: the configuration that ran
// and the tokens per second it reached. Field names and meanings:
// docs/throughput-schema.md.
type ThroughputCase struct {
	ID           string             `json:"id"`
	Source       string             `json:"source"`
	Trust        string             `json:"trust"`
	Model        string             `json:"model"`
	Method       string             `json:"method"`
	Precision    string             `json:"precision"`
	Quant        *Quant             `json:"quant"`
	LoRA         *ThroughputLoRA    `json:"lora"`
	SeqLen       *int               `json:"seq_len"`
	SeqLenKind   string             `json:"seq_len_kind"`
	Batch        *int               `json:"batch"`
	GradAccum    *int               `json:"grad_accum"`
	GradCkpt     *string            `json:"grad_ckpt"`
	Optimizer    *string            `json:"optimizer"`
	Attn         *string            `json:"attn"`
	OtherKernels []string           `json:"other_kernels"`
	Framework    string             `json:"framework"`
	GPU          ThroughputGPU      `json:"gpu"`
	Sharding     Sharding           `json:"sharding"`
	Measured     ThroughputMeasured `json:"measured"`
	Notes        string             `json:"notes"`
}

// ThroughputLoRA is the adapter configuration of a lora/qlora speed case;
// unlike a memory case, rank and targets may be unknown (null): they move
// a step's FLOPs by a percent or less.
type ThroughputLoRA struct {
	Rank    *int     `json:"rank"`
	Targets []string `json:"targets"`
}

// ThroughputGPU is the hardware a speed case ran on.
type ThroughputGPU struct {
	Name    *string  `json:"name"`
	Count   *int     `json:"count"`
	Nodes   *int     `json:"nodes"`
	VRAMGiB *float64 `json:"vram_gib"`
}

// ThroughputMeasured is the speed of a case: training tokens per second of
// all its GPUs together, the figure as the source printed it, and how the
// first was computed from the second when it was.
type ThroughputMeasured struct {
	TokensPerSec *float64 `json:"tokens_per_sec"`
	Original     string   `json:"original"`
	Derivation   *string  `json:"derivation"`
}

// ErrInvalidThroughputCase is wrapped by every validation error of ReadThroughput.
var ErrInvalidThroughputCase = errors.New("invalid throughput case")

// Checkpointing modes a speed case may name: the memory schema's, plus
// selective (op- or layer-level recompute of part of the forward), which
// the time model does not represent (it is scored as no recompute).
var throughputCkpt = set("none", "full", "unsloth", "offload", "selective")

// maxTokensPerSec bounds a measured speed: 10^9 tokens/s is beyond any
// cluster a fine-tuning row describes, and the bound keeps errors finite.
const maxTokensPerSec = 1e9

// ReadThroughput reads JSON Lines speed cases from r; name is used in
// errors (usually the file name). Blank lines are skipped. The first invalid
// line stops the read with an error naming the file, line, case id, field
// and value.
func ReadThroughput(r io.Reader, name string) ([]ThroughputCase, error) {
	return readJSONLines(r, name, ErrInvalidThroughputCase, true, func(c *ThroughputCase) (string, error) { return c.ID, c.Validate() })
}

// Validate checks a speed case: required fields present, choices from the
// estimator's tables, counts within the bounds estimate.Request.Normalize
// applies, and a measured speed that is a finite positive number.
func (c *ThroughputCase) Validate() error {
	f := fieldCheck{ErrInvalidThroughputCase, c.ID}
	bad := f.bad
	var strategy, offload string
	if c.Sharding.Strategy != "" {
		strategy = unknownChoice(estimate.ParseStrategy, c.Sharding.Strategy)
	}
	if c.Sharding.CPUOffload != "" {
		offload = unknownChoice(estimate.ParseOffload, c.Sharding.CPUOffload)
	}
	switch {
	case c.ID == "":
		return bad("id", `""`)
	case c.Source == "":
		return bad("source", `"" (every row names where its figure comes from)`)
	case !validTrust[c.Trust]:
		return bad("trust", fmt.Sprintf("%q (want high, medium or low)", c.Trust))
	case c.Model == "":
		return bad("model", `""`)
	case c.Framework == "":
		return bad("framework", `""`)
	}
	if m := unknownChoice(estimate.ParseMethod, c.Method); m != "" {
		return bad("method", m)
	}
	if p := unknownChoice(estimate.ParsePrecision, c.Precision); p != "" {
		return bad("precision", p)
	}
	switch {
	case strategy != "":
		return bad("sharding.strategy", strategy)
	case offload != "":
		return bad("sharding.cpu_offload", offload)
	case c.GradCkpt != nil && !throughputCkpt[*c.GradCkpt]:
		return bad("grad_ckpt", fmt.Sprintf("%q (want none, full, selective, unsloth or offload)", *c.GradCkpt))
	case (c.Method == "lora" || c.Method == "qlora") && c.LoRA == nil:
		return bad("lora", "null for a "+c.Method+" case")
	case c.Method == "full" && c.LoRA != nil:
		return bad("lora", "set for a full case (a full fine-tune has no adapters)")
	case c.Method == "qlora" && c.Quant == nil:
		return bad("quant", "null for a qlora case")
	case c.Measured.TokensPerSec == nil:
		return bad("measured.tokens_per_sec", "null (a row without a speed measures nothing)")
	case c.Measured.Original == "":
		return bad("measured.original", `"" (quote the figure as the source prints it)`)
	}
	if v := *c.Measured.TokensPerSec; math.IsNaN(v) || v <= 0 || v > maxTokensPerSec {
		return bad("measured.tokens_per_sec", fmt.Sprintf("%g (want a number above 0 and at most %g)", v, maxTokensPerSec))
	}
	if g := c.GPU.VRAMGiB; g != nil {
		if _, err := estimate.GiBBytes("gpu.vram_gib", *g); err != nil {
			return bad("gpu.vram_gib", fmt.Sprintf("%v (%v)", *g, err))
		}
	}
	if err := f.runCounts(c.SeqLen, c.Batch, c.GradAccum, c.GPU.Count); err != nil {
		return err
	}
	if err := f.intIn("gpu.nodes", c.GPU.Nodes, 1, estimate.MaxGPUs); err != nil {
		return err
	}
	if c.GPU.Nodes != nil && c.GPU.Count != nil && *c.GPU.Nodes > *c.GPU.Count {
		return bad("gpu.nodes", fmt.Sprintf("%d (more nodes than the %d GPUs)", *c.GPU.Nodes, *c.GPU.Count))
	}
	if err := f.microBatch(c.SeqLen, c.Batch); err != nil {
		return err
	}
	if l := c.LoRA; l != nil {
		if err := f.intIn("lora.rank", l.Rank, 1, estimate.MaxLoRARank); err != nil {
			return err
		}
	}
	return nil
}
