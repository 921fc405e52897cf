package cli

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/evidence"
)

// TestValidateBy groups the dev cohort with --by and checks every group
// against the cases themselves: the keys partition the cases, each group's n,
// unsupported, median and worst are what its cases' errors say.
func TestValidateBy(t *testing.T) {
	const file = "../../evidence/dev.jsonl"
	var out, errb bytes.Buffer
	env := Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	if code := Main([]string{"validate", file, "--json", "--by", "model_type,method+grad_ckpt,seq_len"}, env); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var doc ValidateJSON
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	cases, err := readCasesFile(file)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]evidence.Case{}
	for _, c := range cases {
		byID[c.ID] = c
	}
	rep := doc.Estimators[0]
	if got := len(rep.By); got != 3 {
		t.Fatalf("by has %d groupings, want 3: %v", got, rep.By)
	}
	for item, key := range map[string]func(evidence.Case) string{
		"model_type":       func(c evidence.Case) string { return str(c.Arch) },
		"method+grad_ckpt": func(c evidence.Case) string { return c.Method + "+" + str(c.GradCkpt) },
		"seq_len":          func(c evidence.Case) string { return num(c.SeqLen) },
	} {
		want := map[string][]evidence.CaseResult{}
		for _, cr := range doc.Cases {
			k := key(byID[cr.ID])
			want[k] = append(want[k], cr.CaseResult)
		}
		got := rep.By[item]
		if len(got) != len(want) {
			t.Errorf("by %s: %d groups, want %d", item, len(got), len(want))
		}
		for k, rs := range want {
			g, ok := got[k]
			if !ok {
				t.Errorf("by %s: no group %q", item, k)
				continue
			}
			var abs []float64
			var worst *float64
			unsup := 0
			for _, r := range rs {
				if r.Status == evidence.StatusUnsupported {
					unsup++
				}
				if r.Status != evidence.StatusOK {
					continue
				}
				abs = append(abs, math.Abs(*r.ErrorPct))
				if worst == nil || math.Abs(*r.ErrorPct) > math.Abs(*worst) {
					worst = r.ErrorPct
				}
			}
			if g.N != len(abs) || g.Unsupported != unsup {
				t.Errorf("by %s %s: n %d unsupported %d, want %d and %d", item, k, g.N, g.Unsupported, len(abs), unsup)
			}
			if len(abs) == 0 {
				if g.Worst != nil || g.MedianAbs != nil {
					t.Errorf("by %s %s: statistics of an empty group: %+v", item, k, g)
				}
				continue
			}
			if med := math.Round(evidence.Quantile(abs, 0.5)*1000) / 1000; g.MedianAbs == nil || *g.MedianAbs != med {
				t.Errorf("by %s %s: median |err| %v, want %v", item, k, g.MedianAbs, med)
			}
			if g.Worst == nil || *g.Worst != *worst {
				t.Errorf("by %s %s: worst %v, want %v", item, k, g.Worst, *worst)
			}
		}
	}
	if doc.Comparison != nil {
		t.Errorf("one estimator, yet a comparison")
	}

	// The text report prints one table per item.
	out.Reset()
	if code := Main([]string{"validate", file, "--by", "model_type,attn"}, env); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, s := range []string{"\nby model_type (canifinetune):\n  model_type ", "\nby attn (canifinetune):\n  attn "} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("text report lacks %q:\n%s", s, out.String())
		}
	}
}

func TestValidateByUsage(t *testing.T) {
	for _, by := range []string{"family", "method+nope", ""} {
		var out, errb bytes.Buffer
		code := Main([]string{"validate", "../../evidence/dev.jsonl", "--by", by}, Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
		if by == "" {
			if code != 0 {
				t.Errorf("--by '': exit %d, want 0 (no grouping): %s", code, errb.String())
			}
			continue
		}
		if code != ExitUsage || !strings.Contains(errb.String(), "is not a field to group by") {
			t.Errorf("--by %s: exit %d, stderr %q; want %d naming the field", by, code, errb.String(), ExitUsage)
		}
	}
}
