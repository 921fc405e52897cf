package web

import (
	"fmt"
	"sync"

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
	// HeldOut is the same slice's error when each source family is
	// predicted by coefficients fitted without it (evidence.CrossValidate;
	// trust high and medium, non-OOM rows), for the default estimator
	// only; nil while it is computed or when the slice has no such row.
	HeldOut *evidence.Summary
	// HeldOutPending: the held-out figures are being computed.
	HeldOutPending bool
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
	var cv *evidence.CrossValidation
	pending := false
	if estimator == estimate.Default {
		cv, pending = heldOut.get(m.cases)
	}
	var out []ErrorSlice
	for _, sl := range []struct {
		label string
		match func(evidence.CaseResult) bool
	}{
		{"method " + method, func(r evidence.CaseResult) bool { return r.Method == method }},
		{fmt.Sprintf("method %s, family %s", method, family), func(r evidence.CaseResult) bool {
			e, err := catalog.Lookup(r.Model)
			return r.Method == method && family != "" && err == nil && e.Family == family
		}},
	} {
		s := evidence.Summarize(filterCases(rep.Cases, sl.match))
		if s.N == 0 {
			continue
		}
		es := ErrorSlice{Label: sl.label, Summary: s, HeldOutPending: pending}
		if cv != nil {
			if h := evidence.Summarize(filterCases(cv.Cases, sl.match)); h.N > 0 {
				es.HeldOut = &h
			}
		}
		out = append(out, es)
	}
	return out
}

func filterCases(rs []evidence.CaseResult, keep func(evidence.CaseResult) bool) []evidence.CaseResult {
	var out []evidence.CaseResult
	for _, r := range rs {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// heldOut is the leave-one-source-family-out cross-validation of the
// default estimator on the development cohort: a fit per source family,
// tens of seconds of CPU, the same for every Server of a process (the
// cohort and the estimator are built in). It runs once, in the background,
// from the first page that shows an error table, so that no request waits
// for it and a server nobody asks (the load test, the API) never pays it.
var heldOut lazyCrossValidation

type lazyCrossValidation struct {
	start sync.Once
	done  chan struct{}
	cv    *evidence.CrossValidation
	err   error
}

// get returns the cross-validation when it is done; pending while it runs.
// A failure leaves the held-out column out (the in-sample figures stand).
func (l *lazyCrossValidation) get(cases []evidence.Case) (cv *evidence.CrossValidation, pending bool) {
	l.start.Do(func() {
		l.done = make(chan struct{})
		go func() {
			defer close(l.done)
			cal, err := evidence.Fit(cases, evidence.DevCohortName)
			if err != nil {
				l.err = err
				return
			}
			l.cv, l.err = evidence.CrossValidate(cases, cal)
		}()
	})
	select {
	case <-l.done:
		return l.cv, false
	default:
		return nil, true
	}
}

// wait blocks until the cross-validation is done (tests).
func (l *lazyCrossValidation) wait(cases []evidence.Case) error {
	l.get(cases)
	<-l.done
	return l.err
}
