package evidence

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestReadCasesDev(t *testing.T) {
	f, err := os.Open("dev.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cases, err := ReadCases(f, "dev.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) != 164 {
		t.Errorf("got %d cases, want 164", len(cases))
	}
	oom := 0
	for _, c := range cases {
		if c.Measured.OOM {
			oom++
		}
	}
	if oom != 4 {
		t.Errorf("got %d OOM cases, want 4", oom)
	}
}

func TestReadCasesErrors(t *testing.T) {
	good := `{"id":"a","model":"m","method":"full","precision":"bf16-true","measured":{"kind":"reserved","gib":3.5,"oom":false},"sharding":{"strategy":"none","cpu_offload":"none"}}`
	lora := `{"id":"a","model":"m","method":"lora","precision":"bf16-true","lora":{"rank":8,"alpha":16,"targets":["q_proj"]},"measured":{"kind":"reserved","gib":3.5,"oom":false},"sharding":{"strategy":"none","cpu_offload":"none"}}`
	tests := []struct {
		name, in, want string
	}{
		{"not json", "{", "x.jsonl:1"},
		{"bad method", strings.Replace(good, `"full"`, `"dpo"`, 1), `field method: bad value "dpo"`},
		{"bad kind", strings.Replace(good, `"reserved"`, `"peak"`, 1), `field measured.kind`},
		{"negative gib", strings.Replace(good, `3.5`, `-1`, 1), `field measured.gib: bad value -1`},
		{"oom with figure", strings.Replace(good, `"oom":false`, `"oom":true`, 1), `an OOM has no exact peak`},
		{"missing figure", strings.Replace(good, `"gib":3.5`, `"gib":null`, 1), `null without oom=true`},
		{"duplicate id", good + "\n" + good, `x.jsonl:2: invalid case: id "a" already used on line 1`},
		{"lora without lora", strings.Replace(good, `"full"`, `"lora"`, 1), `field lora: bad value null`},
		{"lora on full", strings.Replace(good, `"measured"`, `"lora":{"rank":8,"targets":["q_proj"]},"measured"`, 1), `field lora: bad value set for a full case`},
		{"rank 2^40", strings.Replace(lora, `"rank":8`, `"rank":1099511627776`, 1), `x.jsonl:1: invalid case: case "a": field lora.rank: bad value 1099511627776 (want an integer in 1..1048576)`},
		{"rank 0", strings.Replace(lora, `"rank":8`, `"rank":0`, 1), `field lora.rank: bad value 0`},
		{"alpha 0", strings.Replace(lora, `"alpha":16`, `"alpha":0`, 1), `field lora.alpha: bad value 0`},
		{"dropout 1", strings.Replace(lora, `"alpha":16`, `"alpha":16,"dropout":1`, 1), `field lora.dropout: bad value 1 (want a probability in [0, 1))`},
		{"dropout negative", strings.Replace(lora, `"alpha":16`, `"alpha":16,"dropout":-0.1`, 1), `field lora.dropout: bad value -0.1`},
		{"tiny gib", strings.Replace(good, `3.5`, `1e-308`, 1), `field measured.gib: bad value 1e-308 (want a size in GiB from 0.0009765625 to 16384)`},
		{"huge gib", strings.Replace(good, `3.5`, `1e300`, 1), `field measured.gib: bad value 1e+300`},
		{"seq_len huge", strings.Replace(good, `"measured"`, `"seq_len":1073741824,"measured"`, 1), `field seq_len: bad value 1073741824 (want an integer in 1..16777216)`},
		{"batch negative", strings.Replace(good, `"measured"`, `"batch":-1,"measured"`, 1), `field batch: bad value -1`},
		{"tokens", strings.Replace(good, `"measured"`, `"seq_len":1048576,"batch":1024,"measured"`, 1), `field seq_len × batch`},
		{"grad_accum 0", strings.Replace(good, `"measured"`, `"grad_accum":0,"measured"`, 1), `field grad_accum: bad value 0`},
		{"gpu count 0", strings.Replace(good, `"measured"`, `"gpu":{"count":0},"measured"`, 1), `field gpu.count: bad value 0`},
		{"vram tiny", strings.Replace(good, `"measured"`, `"gpu":{"vram_gib":1e-9},"measured"`, 1), `field gpu.vram_gib: bad value 1e-09`},
		{"two values on a line", good + " " + strings.Replace(good, `"a"`, `"b"`, 1), `x.jsonl:1: invalid case: more than one JSON value on the line`},
		{"trailing garbage", good + " x", `x.jsonl:1: invalid case`},
		{"line over 16 MiB", good + "\n" + strings.Replace(good, `"id":"a"`, `"id":"b","notes":"`+strings.Repeat("x", 17<<20)+`"`, 1), `x.jsonl:2: invalid case: line longer than 16 MiB`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadCases(strings.NewReader(tt.in), "x.jsonl")
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalidCase) {
				t.Errorf("err = %v, want it to contain %q and wrap ErrInvalidCase", err, tt.want)
			}
		})
	}
	if cs, err := ReadCases(strings.NewReader(lora+"\n"), "x.jsonl"); err != nil || len(cs) != 1 {
		t.Errorf("good lora input: %v, %d cases", err, len(cs))
	}
	if cs, err := ReadCases(strings.NewReader(good+"\n\n"), "x.jsonl"); err != nil || len(cs) != 1 {
		t.Errorf("good input: %v, %d cases", err, len(cs))
	}
}

// eager_loss says a compiled torchtitan run's loss ran eager; on any other
// row it is a transcription error, refused by field.
func TestEagerLossValidated(t *testing.T) {
	row := func(framework, kernels string) string {
		return `{"id": "x-001", "source": "s", "trust": "low", "model": "meta-llama/Llama-3.1-8B", "arch": "llama", "method": "full", "precision": "bf16-mixed", "quant": null, "lora": null, "seq_len": 8192, "seq_len_kind": "packed", "batch": 1, "grad_accum": 1, "grad_ckpt": "selective-op", "optimizer": "adamw_torch", "optimizer_state_dtype": null, "attn": "sdpa", "fused_ce": "none", "other_kernels": [` + kernels + `], "framework": "` + framework + `", "gpu": {"name": null, "count": 8, "vram_gib": 80}, "sharding": {"strategy": "fsdp_full_shard", "cpu_offload": "none"}, "eager_loss": true, "measured": {"kind": "reserved", "gib": 40, "oom": false, "original": "40 GiB"}, "notes": ""}`
	}
	if _, err := ReadCases(strings.NewReader(row("torchtitan", `"torch.compile"`)), "ok.jsonl"); err != nil {
		t.Errorf("compiled torchtitan row refused: %v", err)
	}
	for _, bad := range []string{row("torchtitan", ""), row("hf-trainer", `"torch.compile"`)} {
		_, err := ReadCases(strings.NewReader(bad), "bad.jsonl")
		if err == nil || !strings.Contains(err.Error(), "eager_loss") {
			t.Errorf("err %v, want one naming eager_loss", err)
		}
	}
}
