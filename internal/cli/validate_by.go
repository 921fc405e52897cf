package cli

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/canifinetune/canifinetune/evidence"
)

// byFields are the case fields --by can group on, each read from a case the
// way validate sees it; a field the case leaves null reads "unstated".
var byFields = map[string]func(evidence.Case) string{
	"model_type":  func(c evidence.Case) string { return str(c.Arch) },
	"model":       func(c evidence.Case) string { return c.Model },
	"method":      func(c evidence.Case) string { return c.Method },
	"precision":   func(c evidence.Case) string { return c.Precision },
	"grad_ckpt":   func(c evidence.Case) string { return str(c.GradCkpt) },
	"attn":        func(c evidence.Case) string { return str(c.Attn) },
	"optimizer":   func(c evidence.Case) string { return str(c.Optimizer) },
	"framework":   func(c evidence.Case) string { return c.Framework },
	"seq_len":     func(c evidence.Case) string { return num(c.SeqLen) },
	"batch":       func(c evidence.Case) string { return num(c.Batch) },
	"grad_accum":  func(c evidence.Case) string { return num(c.GradAccum) },
	"measured_as": func(c evidence.Case) string { return c.Measured.Kind },
}

func str(p *string) string {
	if p == nil || *p == "" {
		return "unstated"
	}
	return *p
}

func num(p *int) string {
	if p == nil {
		return "unstated"
	}
	return strconv.Itoa(*p)
}

// byGroupings checks --by: each item is a field or fields joined by "+"
// (a grouping on their combination).
func byGroupings(items []string) ([]string, error) {
	names := slices.Sorted(maps.Keys(byFields))
	for _, it := range items {
		for f := range strings.SplitSeq(it, "+") {
			if _, ok := byFields[f]; !ok {
				return nil, usageErrorf("--by model_type,grad_ckpt,method+attn",
					"--by %q: %q is not a field to group by; want one or more of %s, or fields joined by +", it, f, strings.Join(names, ","))
			}
		}
	}
	return items, nil
}

// groupSummaryJSON is a Summary with the case of largest |error|, signed:
// the worst error either way, which --by groupings report besides the worst
// under-estimate.
type groupSummaryJSON struct {
	summaryJSON
	Worst   *float64 `json:"worst_error_pct,omitempty"`
	WorstID string   `json:"worst_error_id,omitempty"`
}

// byJSON groups a report's cases on each --by item: item → key → summary.
// Keys of a combined item join the fields' values with "+".
func byJSON(items []string, cases []evidence.Case, r evidence.Report) map[string]map[string]groupSummaryJSON {
	if len(items) == 0 {
		return nil
	}
	out := map[string]map[string]groupSummaryJSON{}
	for _, it := range items {
		fields := strings.Split(it, "+")
		part := map[string][]evidence.CaseResult{}
		for i, c := range cases {
			vals := make([]string, len(fields))
			for j, f := range fields {
				vals[j] = byFields[f](c)
			}
			k := strings.Join(vals, "+")
			part[k] = append(part[k], r.Cases[i])
		}
		m := map[string]groupSummaryJSON{}
		for k, rs := range part {
			g := groupSummaryJSON{summaryJSON: newSummaryJSON(evidence.Summarize(rs))}
			for _, cr := range rs {
				if cr.Status == evidence.StatusOK && (g.Worst == nil || math.Abs(*cr.ErrorPct) > math.Abs(*g.Worst)) {
					g.Worst, g.WorstID = ptr(*cr.ErrorPct), cr.ID
				}
			}
			m[k] = g
		}
		out[it] = m
	}
	return out
}

// printBy writes one table per --by item for a report.
func printBy(w io.Writer, items []string, r reportJSON) {
	for _, it := range items {
		m := r.By[it]
		fmt.Fprintf(w, "\nby %s (%s):\n", it, r.Name)
		t := table{align: "lrrrrrrrl"}
		t.add(it, "n", "unsup.", "median |err|", "median err", "p90 |err|", "worst", "worst under", "")
		for _, k := range slices.Sorted(maps.Keys(m)) {
			s := m[k]
			worst, under := "–", "–"
			if s.Worst != nil {
				worst = pct(s.Worst)
				under = "none"
			}
			if s.WorstUnder != nil {
				under = pct(s.WorstUnder)
			}
			t.add(k, fmt.Sprint(s.N), fmt.Sprint(s.Unsupported), abspct(s.MedianAbs), pct(s.MedianSigned), abspct(s.P90Abs), worst, under, s.WorstID)
		}
		t.write(w, "  ")
	}
}
