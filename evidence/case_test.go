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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadCases(strings.NewReader(tt.in), "x.jsonl")
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalidCase) {
				t.Errorf("err = %v, want it to contain %q and wrap ErrInvalidCase", err, tt.want)
			}
		})
	}
	if cs, err := ReadCases(strings.NewReader(good+"\n\n"), "x.jsonl"); err != nil || len(cs) != 1 {
		t.Errorf("good input: %v, %d cases", err, len(cs))
	}
}
