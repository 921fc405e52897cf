package evidence

import (
	"fmt"
	"slices"
	"sort"
)

// Filter selects cases before they are scored. An empty list selects every
// value of its field.
type Filter struct {
	// Trust keeps cases whose trust is one of these ("high", "medium", "low").
	Trust []string
	// Method keeps cases whose method is one of these ("full", "lora", "qlora").
	Method []string
}

// Select returns the cases the filter keeps, in their original order.
func (f Filter) Select(cases []Case) []Case {
	var out []Case
	for _, c := range cases {
		if len(f.Trust) > 0 && !slices.Contains(f.Trust, c.Trust) {
			continue
		}
		if len(f.Method) > 0 && !slices.Contains(f.Method, c.Method) {
			continue
		}
		out = append(out, c)
	}
	return out
}

// ReasonCount is one reason an estimator could not estimate cases, with how
// many cases and which.
type ReasonCount struct {
	Reason string   `json:"reason"`
	Count  int      `json:"count"`
	IDs    []string `json:"ids"`
}

// UnsupportedReasons groups the unsupported results by their exact reason,
// most frequent first and ties by reason, so a report lists every row it did
// not score instead of dropping it. IDs keep the results' order.
func UnsupportedReasons(rs []CaseResult) []ReasonCount {
	idx := map[string]int{}
	var out []ReasonCount
	for _, r := range rs {
		if r.Status != StatusUnsupported {
			continue
		}
		i, ok := idx[r.Unsupported]
		if !ok {
			i = len(out)
			idx[r.Unsupported] = i
			out = append(out, ReasonCount{Reason: r.Unsupported})
		}
		out[i].Count++
		out[i].IDs = append(out[i].IDs, r.ID)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Reason < out[j].Reason
	})
	return out
}

// Aggregate builds a report from results already scored, one per case and in
// the cases' order: the summaries overall and by method, source (framework)
// and trust, and the verdict classification. Score is Aggregate over
// ScoreCase; SameObservations uses it to re-summarise a subset.
func Aggregate(estimator, version string, cases []Case, rs []CaseResult) Report {
	rep := Report{Estimator: estimator, Version: version, Cases: rs}
	rep.Summary = Summarize(rs)
	rep.ByMethod = group(rs, func(r CaseResult) string { return r.Method })
	rep.BySource = group(rs, func(r CaseResult) string { return r.Framework })
	rep.ByTrust = group(rs, func(r CaseResult) string { return r.Trust })
	rep.Classification = Classify(cases, rs)
	return rep
}

// SameObservations restricts reports of several estimators, each scored on
// the same cases in the same order, to the cases that every one of them
// supports, and re-summarises each on that subset. Comparing estimators on
// their own supported rows would reward one that refuses the hard cases; on
// the same observations the figures differ only by the estimators.
//
// It returns the kept cases and the restricted reports (in the order given).
// An error means the reports were not scored on these cases.
func SameObservations(cases []Case, reps []Report) ([]Case, []Report, error) {
	for _, rep := range reps {
		if len(rep.Cases) != len(cases) {
			return nil, nil, fmt.Errorf("report of %s has %d cases, want %d", rep.Estimator, len(rep.Cases), len(cases))
		}
		for i, r := range rep.Cases {
			if r.ID != cases[i].ID {
				return nil, nil, fmt.Errorf("report of %s: case %d is %q, want %q", rep.Estimator, i, r.ID, cases[i].ID)
			}
		}
	}
	var keep []int
	for i := range cases {
		ok := true
		for _, rep := range reps {
			if rep.Cases[i].Status == StatusUnsupported {
				ok = false
				break
			}
		}
		if ok {
			keep = append(keep, i)
		}
	}
	kept := make([]Case, 0, len(keep))
	for _, i := range keep {
		kept = append(kept, cases[i])
	}
	out := make([]Report, 0, len(reps))
	for _, rep := range reps {
		rs := make([]CaseResult, 0, len(keep))
		for _, i := range keep {
			rs = append(rs, rep.Cases[i])
		}
		out = append(out, Aggregate(rep.Estimator, rep.Version, kept, rs))
	}
	return kept, out, nil
}
