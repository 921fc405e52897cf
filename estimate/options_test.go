package estimate

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// parsers reads a value of every option through its Parse function, by the
// option's name in Options.
var parsers = map[string]func(string) (string, error){
	"method":                parseAs(ParseMethod),
	"precision":             parseAs(ParsePrecision),
	"quant":                 parseAs(ParseQuant),
	"quant_storage":         parseAs(ParseQuantStorage),
	"grad_ckpt":             parseAs(ParseCheckpointing),
	"optimizer":             parseAs(ParseOptimizer),
	"optimizer_state_dtype": parseAs(ParseStateDtype),
	"attn":                  parseAs(ParseAttention),
	"fused_ce":              parseAs(ParseLossKernel),
	"stack":                 parseAs(ParseStack),
	"strategy":              parseAs(ParseStrategy),
	"cpu_offload":           parseAs(ParseOffload),
	"kernels":               parseAs(ParseKernel),
	"task":                  parseAs(ParseTask),
}

func parseAs[T ~string](parse func(string) (T, error)) func(string) (string, error) {
	return func(s string) (string, error) {
		v, err := parse(s)
		return string(v), err
	}
}

// Every value of every table reads back as itself, every alias as the value
// it names, and no spelling names two values.
func TestOptionsRoundTrip(t *testing.T) {
	if len(Options()) != len(parsers) {
		t.Fatalf("Options lists %d options, the test parses %d", len(Options()), len(parsers))
	}
	for _, o := range Options() {
		parse, ok := parsers[o.Name]
		if !ok {
			t.Fatalf("option %s has no parser in the test", o.Name)
		}
		if len(o.Choices) == 0 {
			t.Errorf("%s: an empty table", o.Name)
		}
		seen := map[string]string{}
		for _, c := range o.Choices {
			if c.Help == "" {
				t.Errorf("%s %s: no help line", o.Name, c.Name)
			}
			for _, s := range append([]string{c.Name}, c.Aliases...) {
				if prev, dup := seen[s]; dup {
					t.Errorf("%s: %q names both %s and %s", o.Name, s, prev, c.Name)
				}
				seen[s] = c.Name
				got, err := parse(s)
				if err != nil || got != c.Name {
					t.Errorf("%s: Parse(%q) = %q, %v; want %q", o.Name, s, got, err, c.Name)
				}
			}
		}
	}
}

// An unknown value is an ErrInvalidRequest that names it and lists the
// table, aliases aside.
func TestParseUnknown(t *testing.T) {
	_, err := ParseOptimizer("adamw_9bit")
	var ue *UnknownValueError
	if !errors.As(err, &ue) || !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("ParseOptimizer(adamw_9bit) = %v; want an UnknownValueError wrapping ErrInvalidRequest", err)
	}
	var names []string
	for _, o := range Optimizers {
		names = append(names, string(o.Name))
	}
	if d := cmp.Diff(names, ue.Valid); d != "" {
		t.Errorf("valid list (-table +error):\n%s", d)
	}
	want := `unknown optimizer "adamw_9bit" (want one of adamw_torch, adamw_torch_fused, adamw_torch_forloop, sgd, adamw_8bit, adamw_torch_8bit, paged_adamw_8bit, paged_adamw_32bit, adafactor, lion_8bit)`
	if err.Error() != want {
		t.Errorf("error %q\nwant  %q", err, want)
	}
	if _, err := ParseStrategy(""); err == nil {
		t.Error(`ParseStrategy("") accepted the empty string`)
	}
}

// Normalize reads each option through its table: an alias becomes the
// value it names, and an unknown value is refused by name.
func TestNormalizeReadsTables(t *testing.T) {
	m := parseModel(t, tinyLlamaJSON)
	r, err := Request{Model: m, SeqLen: 8, Batch: 1, Optimizer: "adamw_bnb_8bit"}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	if r.Optimizer != AdamW8bit {
		t.Errorf("adamw_bnb_8bit normalized to %q, want %q", r.Optimizer, AdamW8bit)
	}
	for _, tt := range []struct {
		req  Request
		want string
	}{
		{Request{Attn: "flashy"}, `unknown attention "flashy"`},
		{Request{GradCkpt: "selective"}, `unknown gradient checkpointing "selective"`},
		{Request{FusedCE: "fused"}, `unknown fused cross-entropy "fused"`},
		{Request{Stack: "deepspeed-chat"}, `unknown stack "deepspeed-chat"`},
		{Request{OptimizerStateDtype: "fp8"}, `unknown optimizer state dtype "fp8"`},
		{Request{Method: QLoRA, Quant: "nf3"}, `unknown quantization "nf3"`},
		{Request{Sharding: Sharding{Strategy: "zero4", GPUs: 2}}, `unknown sharding strategy "zero4"`},
	} {
		tt.req.Model, tt.req.SeqLen, tt.req.Batch = m, 8, 1
		_, err := tt.req.Normalize()
		if err == nil || !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Normalize: %v; want an invalid request containing %q", err, tt.want)
		}
	}
}

// The properties the estimators branch on select the values they selected
// by name before the tables existed.
func TestOptionProperties(t *testing.T) {
	pick := func(keep func(Strategy) bool) []Strategy {
		var out []Strategy
		for _, s := range Strategies {
			if keep(s.Name) {
				out = append(out, s.Name)
			}
		}
		return out
	}
	for _, tt := range []struct {
		name string
		got  []Strategy
		want []Strategy
	}{
		{"params sharded", pick(paramsSharded), []Strategy{FSDPFullShard, FSDPHybridShard, ZeRO3}},
		{"fsdp sharded", pick(fsdpSharded), []Strategy{FSDPFullShard, FSDPShardGradOp, FSDPHybridShard}},
		{"replicas", pick(func(s Strategy) bool { return s.Spec().DataParallel && s.Spec().Shards == ShardNothing }), []Strategy{DDP, FSDPNoShard, ZeRO0}},
		{"no optimizer-only offload", pick(func(s Strategy) bool { return !s.Spec().OffloadsOptimizer }), []Strategy{NoSharding, DDP, FSDPFullShard, FSDPShardGradOp, FSDPNoShard, FSDPHybridShard, ZeRO0}},
		{"no parameter offload", pick(func(s Strategy) bool { return !s.Spec().OffloadsParams }), []Strategy{NoSharding, DDP, ZeRO0, ZeRO1, ZeRO2}},
	} {
		if d := cmp.Diff(tt.want, tt.got); d != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, d)
		}
	}
	var eightBit []Optimizer
	for _, o := range Optimizers {
		if o.EightBit {
			eightBit = append(eightBit, o.Name)
		}
	}
	if want := []Optimizer{AdamW8bit, AOAdamW8bit, PagedAdamW8bit, Lion8bit}; !slices.Equal(eightBit, want) {
		t.Errorf("8-bit optimizers %v, want %v", eightBit, want)
	}
	for _, tt := range []struct {
		q          Quant
		bytes, dq4 float64
	}{{NF4, 0.5, 0.0625}, {NF4DQ, 0.5, 0.017}, {FP4, 0.5, 0.0625}, {Int8, 1, 0.15}} {
		if b, meta := quantBytesPerParam(tt.q), quantMetaBytesPerParam(tt.q); b != tt.bytes || meta != tt.dq4 {
			t.Errorf("%s: %v B/param packed, %v metadata; want %v, %v", tt.q, b, meta, tt.bytes, tt.dq4)
		}
	}
}
