package cli

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/evidence"
)

// ValidateThroughputJSON is `validate --throughput --json` (schema:
// docs/validate-throughput-json.md).
type ValidateThroughputJSON struct {
	File  string `json:"file"`
	Cases int    `json:"cases_in_file"`
	evidence.ThroughputReport
}

// runThroughput scores the time model against a speed cohort.
func (c *ValidateCmd) runThroughput(env *Env) error {
	switch {
	case c.Throughput == "":
		return usageErrorf("canifinetune validate evidence/dev.jsonl  or  canifinetune validate --throughput evidence/throughput.jsonl",
			"validate needs a cases file or --throughput FILE")
	case c.File != "":
		return usageErrorf("canifinetune validate --throughput "+c.Throughput,
			"--throughput scores speeds, not the memory cases in %s: give one or the other", c.File)
	case len(c.Compare) > 0 || c.Calibration != "" || len(c.Trust) > 0 || len(c.Method) > 0 || c.Estimator != "":
		return usageErrorf("canifinetune validate --throughput "+c.Throughput+" [--cases] [--json]",
			"--throughput takes only --cases and --json")
	}
	f, err := os.Open(c.Throughput)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return withHint(ExitError, fmt.Errorf("throughput file %s: no such file", c.Throughput), "canifinetune validate --throughput evidence/throughput.jsonl")
		}
		return fmt.Errorf("open %s: %w", c.Throughput, err)
	}
	defer f.Close()
	cases, err := evidence.ReadThroughput(f, c.Throughput)
	if err != nil {
		return withCode(ExitError, err)
	}
	if len(cases) == 0 {
		return withCode(ExitError, fmt.Errorf("%s: no cases", c.Throughput))
	}
	est, err := estimate.ByName("")
	if err != nil {
		return err
	}
	out := ValidateThroughputJSON{File: c.Throughput, Cases: len(cases), ThroughputReport: evidence.ScoreThroughput(cases, est)}
	if c.JSON {
		return writeJSON(env.Stdout, out)
	}
	printThroughput(env.Stdout, out, c.Cases)
	return nil
}

func printThroughput(w io.Writer, o ValidateThroughputJSON, all bool) {
	classes := make([]string, 0, len(o.MFUByClass))
	for _, c := range slices.Sorted(maps.Keys(o.MFUByClass)) {
		classes = append(classes, fmt.Sprintf("%s %.2f", c, o.MFUByClass[c]))
	}
	fmt.Fprintf(w, "plan's time model (MFU per GPU class: %s) against %s: %d cases, %d scored, %d not\n", strings.Join(classes, ", "), o.File, o.Cases, o.Overall.N, o.Unsupported)
	fmt.Fprintln(w, "error = (predicted − measured) / measured tokens/s; fitted MFU centres a group's errors on zero")
	fmt.Fprintln(w)
	row := func(name string, s evidence.ThroughputSummary) {
		fmt.Fprintf(w, "  %-44s %3d  %6.1f %%  %6.1f %%  %+7.1f %%  %5.2f\n", name, s.N, 100*s.MedianAbs, 100*s.P90Abs, 100*s.MedianSigned, s.FittedMFU)
	}
	fmt.Fprintf(w, "  %-44s %3s  %8s  %8s  %9s  %5s\n", "", "n", "median|e|", "p90|e|", "median e", "MFU")
	row("overall", o.Overall)
	row("overall, each source left out of the MFU fit", o.LeaveOneSourceOut)
	for _, g := range []struct {
		title string
		m     map[string]evidence.ThroughputSummary
	}{{"by method", o.ByMethod}, {"by framework", o.ByFramework}, {"by source", o.BySource}, {"by GPU", o.ByGPU}, {"by framework on GPU", o.ByStackGPU}} {
		fmt.Fprintln(w, g.title)
		for _, k := range evidence.GroupNames(g.m) {
			row(k, g.m[k])
		}
	}
	if all {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "cases (tokens/s of all GPUs):")
		for _, r := range o.Results {
			if r.Unsupported != "" {
				fmt.Fprintf(w, "  %-46s not scored: %s\n", r.ID, r.Unsupported)
				continue
			}
			fmt.Fprintf(w, "  %-46s %10.0f measured %10.0f predicted %+7.1f %%  MFU %.2f\n", r.ID, r.Measured, r.Predicted, 100*r.Error, r.ImpliedMFU)
		}
	} else if o.Unsupported > 0 {
		fmt.Fprintf(w, "\n%d cases not scored (--cases lists why)\n", o.Unsupported)
	}
}
