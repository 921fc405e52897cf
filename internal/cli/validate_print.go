package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/evidence"
)

// printValidate writes the human report: a header saying what was scored, the
// error tables, the verdict classification, the unsupported rows by reason,
// and with perCase every case.
func printValidate(w io.Writer, o ValidateJSON, filters string, perCase bool) {
	var names []string
	for _, r := range o.Estimators {
		names = append(names, r.Name+" "+r.Version)
	}
	sel := fmt.Sprintf("all %d cases", o.Input.Cases)
	if o.Input.Selected != o.Input.Cases {
		sel = fmt.Sprintf("%d of %d cases selected by %s", o.Input.Selected, o.Input.Cases, filters)
	}
	fmt.Fprintf(w, "%s: %s\n", o.Input.File, sel)
	if len(names) == 1 {
		fmt.Fprintf(w, "estimator: %s\n", names[0])
	} else {
		fmt.Fprintf(w, "estimators: %s\n", strings.Join(names, ", "))
	}
	fmt.Fprintln(w, "error = (estimated − measured) / measured, against the measured kind; negative = under-estimate")
	if o.CrossValidation != nil {
		printCrossValidationFirst(w, o.CrossValidation)
	}
	if o.Calibration != nil {
		printCalibration(w, o.Calibration)
	}
	if o.Comparison == nil {
		printSingle(w, o.Estimators[0])
	} else {
		printComparison(w, o)
	}
	printUnsupported(w, o)
	if perCase {
		printCases(w, o)
	}
}

// printCalibration says on which cases the calibration was applied and why
// not on the others.
func printCalibration(w io.Writer, cal *calibrationJSON) {
	fmt.Fprintf(w, "calibration %s (%s, fitted on %s): applied to %d of %d supported cases\n",
		cal.File, cal.Estimator, dash(cal.Cohort), cal.Applied, cal.Applied+cal.NotApplied)
	if cal.NotApplied > 0 {
		fmt.Fprintf(w, "not applied to %d (outside its domain; embedded coefficients used), by reason:\n", cal.NotApplied)
		printReasons(w, cal.NotAppliedReasons)
	}
	fmt.Fprintln(w)
}

func printSingle(w io.Writer, r reportJSON) {
	s := r.Summary
	listed := ""
	if s.Unsupported > 0 {
		listed = " (listed below)"
	}
	fmt.Fprintf(w, "scored %d, OOM %d (no exact peak; in the verdicts only), unsupported %d%s\n\n", s.N, s.OOM, s.Unsupported, listed)
	t := table{align: "lrrrrrrrrl"}
	t.add("", "n", "OOM", "unsup.", "MAPE", "median |err|", "median err", "p90 |err|", "worst under", "")
	row := func(label string, s summaryJSON) {
		under, id := "none", ""
		if s.WorstUnder != nil {
			under, id = pct(s.WorstUnder), s.WorstUnderID
		} else if s.N == 0 {
			under = "–"
		}
		t.add(label, fmt.Sprint(s.N), fmt.Sprint(s.OOM), fmt.Sprint(s.Unsupported), abspct(s.MAPE), abspct(s.MedianAbs), pct(s.MedianSigned), abspct(s.P90Abs), under, id)
	}
	row("all", s)
	for _, g := range groups(r) {
		t.add() // a blank line between breakdowns
		for _, k := range slices.Sorted(maps.Keys(g.m)) {
			row(g.name+" "+k, g.m[k])
		}
	}
	t.write(w, "")
	fmt.Fprintln(w)
	printClassification(w, r.Classification)
}

type summaryGroup struct {
	name string
	m    map[string]summaryJSON
}

// groups are a report's breakdowns in the order they are printed.
func groups(r reportJSON) []summaryGroup {
	return []summaryGroup{{"method", r.ByMethod}, {"source", r.BySource}, {"trust", r.ByTrust}}
}

// printClassification is seed 000's prospective report: each rate with its
// own matched denominator, the excluded verdicts counted.
func printClassification(w io.Writer, cl classificationJSON) {
	fmt.Fprintf(w, "verdicts against outcomes (%d rows with a known card):\n", cl.Rows)
	fmt.Fprintf(w, "  predicted yes → OOM      %s\n", ratio(cl.PredictedYesOOM, cl.PredictedYes))
	fmt.Fprintf(w, "  predicted no  → success  %s\n", ratio(cl.PredictedNoSuccess, cl.PredictedNo))
	fmt.Fprintf(w, "  excluded: %d marginal, %d unknown, %d without a card, %d unsupported\n",
		cl.MarginalExcluded, cl.UnknownExcluded, cl.NoCardExcluded, cl.UnsupportedExcluded)
}

// labels names each estimator's column: its name, with its version when
// another column has the same name (a calibrated estimator next to itself).
func labels(rs []reportJSON) []string {
	count := map[string]map[string]bool{}
	for _, r := range rs {
		if count[r.Name] == nil {
			count[r.Name] = map[string]bool{}
		}
		count[r.Name][r.Version] = true
	}
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Name
		if len(count[r.Name]) > 1 {
			out[i] += " " + r.Version
		}
	}
	return out
}

func printComparison(w io.Writer, o ValidateJSON) {
	cmp := o.Comparison
	label := labels(cmp.Estimators)
	fmt.Fprintf(w, "same observations: the %d of %d selected cases every estimator supports\n", cmp.Rows, o.Input.Selected)
	if cmp.Excluded > 0 {
		fmt.Fprintf(w, "(%d left out: unsupported by at least one estimator, listed below)\n", cmp.Excluded)
	}
	fmt.Fprintln(w)
	t := table{align: "l" + strings.Repeat("r", len(cmp.Estimators))}
	metric := func(label string, f func(reportJSON) string) {
		row := []string{label}
		for _, r := range cmp.Estimators {
			row = append(row, f(r))
		}
		t.add(row...)
	}
	t.add(append([]string{""}, label...)...)
	metric("n scored", func(r reportJSON) string { return fmt.Sprint(r.Summary.N) })
	metric("MAPE", func(r reportJSON) string { return abspct(r.Summary.MAPE) })
	metric("median |err|", func(r reportJSON) string { return abspct(r.Summary.MedianAbs) })
	metric("median err", func(r reportJSON) string { return pct(r.Summary.MedianSigned) })
	metric("p90 |err|", func(r reportJSON) string { return abspct(r.Summary.P90Abs) })
	metric("worst under", func(r reportJSON) string {
		if r.Summary.WorstUnder == nil {
			return "none"
		}
		return pct(r.Summary.WorstUnder)
	})
	metric("  case", func(r reportJSON) string { return r.Summary.WorstUnderID })
	metric("OOM rows", func(r reportJSON) string { return fmt.Sprint(r.Summary.OOM) })
	metric("yes → OOM", func(r reportJSON) string {
		return fmt.Sprintf("%d / %d", r.Classification.PredictedYesOOM, r.Classification.PredictedYes)
	})
	metric("no → success", func(r reportJSON) string {
		return fmt.Sprintf("%d / %d", r.Classification.PredictedNoSuccess, r.Classification.PredictedNo)
	})
	metric("marginal, unknown", func(r reportJSON) string {
		return fmt.Sprintf("%d, %d", r.Classification.MarginalExcluded, r.Classification.UnknownExcluded)
	})
	t.write(w, "")
	fmt.Fprintf(w, "(verdicts over the %d of them with a known card; marginal and unknown verdicts excluded)\n\n", cmp.Estimators[0].Classification.Rows)

	fmt.Fprintln(w, "MAPE by group, same observations:")
	t = table{align: "lr" + strings.Repeat("r", len(cmp.Estimators))}
	t.add(append([]string{"", "n"}, label...)...)
	first := groups(cmp.Estimators[0])
	for gi, g := range first {
		if gi > 0 {
			t.add()
		}
		for _, k := range slices.Sorted(maps.Keys(g.m)) {
			row := []string{g.name + " " + k, fmt.Sprint(g.m[k].N)}
			for _, r := range cmp.Estimators {
				row = append(row, abspct(groups(r)[gi].m[k].MAPE))
			}
			t.add(row...)
		}
	}
	t.write(w, "")
}

// printUnsupported lists every case an estimator could not estimate, grouped
// by reason, so that no case silently leaves the figures. Estimators that
// refuse exactly the same cases for the same reasons (most refusals come from
// turning a case into a request, before any estimator runs) share one list.
func printUnsupported(w io.Writer, o ValidateJSON) {
	type list struct {
		names []string
		r     reportJSON
	}
	var lists []*list
	seen := map[string]*list{}
	label := labels(o.Estimators)
	for i, r := range o.Estimators {
		if len(r.UnsupportedReasons) == 0 {
			continue
		}
		key := fmt.Sprint(r.UnsupportedReasons)
		if l, ok := seen[key]; ok {
			l.names = append(l.names, label[i])
			continue
		}
		l := &list{names: []string{label[i]}, r: r}
		seen[key] = l
		lists = append(lists, l)
	}
	for _, l := range lists {
		who := ""
		if len(o.Estimators) > 1 {
			who = " by " + strings.Join(l.names, ", ")
		}
		fmt.Fprintf(w, "\nunsupported%s: %d of %d cases, by reason:\n", who, l.r.Summary.Unsupported, o.Input.Selected)
		printReasons(w, l.r.UnsupportedReasons)
	}
}

// printReasons writes grouped reasons with their counts and case ids.
func printReasons(w io.Writer, rs []evidence.ReasonCount) {
	for _, rc := range rs {
		fmt.Fprint(w, wrapWords(strings.Fields(rc.Reason), fmt.Sprintf("%4d  ", rc.Count), "      ", 100))
		fmt.Fprint(w, wrapWords(commaList(rc.IDs), "        ", "        ", 100))
	}
}

// commaList puts a comma after every word but the last.
func commaList(xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = x
		if i < len(xs)-1 {
			out[i] += ","
		}
	}
	return out
}

// wrapWords lays words out in lines of at most width runes (a longer word
// gets a line of its own), the first line after first, the others after rest.
func wrapWords(words []string, first, rest string, width int) string {
	var b strings.Builder
	line, bare := first, true
	for _, wd := range words {
		if !bare && utf8.RuneCountInString(line)+1+utf8.RuneCountInString(wd) > width {
			b.WriteString(line + "\n")
			line, bare = rest, true
		}
		if !bare {
			line += " "
		}
		line += wd
		bare = false
	}
	b.WriteString(line + "\n")
	return b.String()
}

// printCases writes every case. With one estimator it adds the components of
// each estimate; with several it puts the estimators side by side.
func printCases(w io.Writer, o ValidateJSON) {
	k := len(o.Estimators)
	fmt.Fprintln(w, "\ncases (GiB; estimated at the measured kind):")
	if k == 1 {
		t := table{align: "llrrrll"}
		t.add("id", "kind", "measured", "estimated", "error", "status", "verdict")
		for _, c := range o.Cases {
			t.add(c.ID, c.Kind, measured(c), gibStr(c.EstimatedGiB), pct(c.ErrorPct), c.Status, dash(c.Verdict))
			if c.Unsupported != "" {
				t.span(wrapWords(strings.Fields("unsupported: "+c.Unsupported), "    ", "      ", 100))
			}
			if len(c.Assumed) > 0 {
				t.span(wrapWords(strings.Fields("assumed from stack defaults: "+strings.Join(c.Assumed, ", ")), "    ", "      ", 100))
			}
		}
		t.write(w, "")
		printComponents(w, o.Cases)
		return
	}
	t := table{align: "llr" + strings.Repeat("rrl", k)}
	head := []string{"id", "kind", "measured"}
	for _, l := range labels(o.Estimators) {
		head = append(head, l, "error", "verdict")
	}
	t.add(head...)
	for i := 0; i+k <= len(o.Cases); i += k {
		c := o.Cases[i]
		row := []string{c.ID, c.Kind, measured(c)}
		for _, e := range o.Cases[i : i+k] {
			if e.Status == evidence.StatusUnsupported {
				row = append(row, "unsupported", "", "")
				continue
			}
			row = append(row, gibStr(e.EstimatedGiB), pct(e.ErrorPct), dash(e.Verdict))
		}
		t.add(row...)
	}
	t.write(w, "")
	fmt.Fprintln(w, "(components, assumed fields and reasons per estimator: --json, or --cases with one estimator)")
}

// componentOrder is the order components are listed in, with short column
// names; components an estimator adds beyond these follow by name.
var componentOrder = []struct {
	name  estimate.ComponentID
	short string
}{
	{estimate.CWeights, "weights"}, {estimate.CQuantOverhead, "quant"}, {estimate.CAdapters, "lora"},
	{estimate.CGradients, "grads"}, {estimate.COptimizer, "optim"}, {estimate.CActivations, "activ"},
	{estimate.CLogits, "logits"}, {estimate.COverhead, "cuda"}, {estimate.CSafety, "safety"},
}

// printComponents writes the components of every estimated case as a matrix,
// one column per component.
func printComponents(w io.Writer, cs []validateCaseJSON) {
	present := map[string]bool{}
	for _, c := range cs {
		for n := range c.Components {
			present[n] = true
		}
	}
	if len(present) == 0 {
		return
	}
	var cols, heads []string
	for _, co := range componentOrder {
		if n := string(co.name); present[n] {
			cols, heads = append(cols, n), append(heads, co.short)
			delete(present, n)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(present)) {
		cols, heads = append(cols, n), append(heads, n)
	}
	fmt.Fprintln(w, "\ncomponents (GiB):")
	t := table{align: "l" + strings.Repeat("r", len(cols))}
	t.add(append([]string{"id"}, heads...)...)
	for _, c := range cs {
		if c.Components == nil {
			continue
		}
		row := []string{c.ID}
		for _, n := range cols {
			if v, ok := c.Components[n]; ok {
				row = append(row, fmt.Sprintf("%.2f", v))
			} else {
				row = append(row, "–")
			}
		}
		t.add(row...)
	}
	t.write(w, "")
}

func measured(c validateCaseJSON) string {
	if c.Status == evidence.StatusOOM {
		return "OOM"
	}
	return gibStr(c.MeasuredGiB)
}

func gibStr(x *float64) string {
	if x == nil {
		return "–"
	}
	return fmt.Sprintf("%.2f", *x)
}

// pct prints a signed percentage; "–" when unknown.
func pct(x *float64) string {
	if x == nil {
		return "–"
	}
	return fmt.Sprintf("%+.1f%%", *x)
}

// abspct prints an unsigned percentage; "–" when unknown.
func abspct(x *float64) string {
	if x == nil {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", *x)
}

func ratio(k, n int) string {
	if n == 0 {
		return "0 / 0"
	}
	return fmt.Sprintf("%d / %d (%.1f%%)", k, n, 100*float64(k)/float64(n))
}

func dash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}
