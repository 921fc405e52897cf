package web

import (
	"fmt"

	"github.com/canifinetune/canifinetune/catalog"
	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/evidence"
)

// measuredError is each estimator scored once on the development cohort
// (evidence.Score, as `canifinetune validate evidence/dev.jsonl` does), kept
// by estimator name, so the page can show the error on the slice of the
// cohort that matches a request.
type measuredError struct {
	cases   []evidence.Case
	reports map[string]evidence.Report
}

func scoreCohort() (*measuredError, error) {
	cases, err := evidence.DevCohort()
	if err != nil {
		return nil, err
	}
	m := &measuredError{cases: cases, reports: map[string]evidence.Report{}}
	for _, n := range estimate.Names() {
		est, err := estimate.ByName(n)
		if err != nil {
			return nil, err
		}
		m.reports[n] = evidence.Score(cases, est)
	}
	return m, nil
}

// ErrorSlice is the estimator's measured error on the cases of the
// development cohort that share something with the request.
type ErrorSlice struct {
	// Label says which cases: "method lora", "method lora, family Qwen2.5".
	Label   string
	Summary evidence.Summary
}

// slices are the error on the cohort's cases of the same method, and of
// the same method and model family; empty slices are left out.
func (m *measuredError) slices(estimator, method, model string) []ErrorSlice {
	rep, ok := m.reports[estimator]
	if !ok {
		return nil
	}
	family := ""
	if e, err := catalog.Lookup(model); err == nil {
		family = e.Family
	}
	var byMethod, byFamily []evidence.CaseResult
	for i, r := range rep.Cases {
		if r.Method != method {
			continue
		}
		byMethod = append(byMethod, r)
		if e, err := catalog.Lookup(m.cases[i].Model); err == nil && family != "" && e.Family == family {
			byFamily = append(byFamily, r)
		}
	}
	var out []ErrorSlice
	if s := evidence.Summarize(byMethod); s.N > 0 {
		out = append(out, ErrorSlice{Label: "method " + method, Summary: s})
	}
	if s := evidence.Summarize(byFamily); s.N > 0 {
		out = append(out, ErrorSlice{Label: fmt.Sprintf("method %s, family %s", method, family), Summary: s})
	}
	return out
}
