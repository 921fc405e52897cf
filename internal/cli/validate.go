package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/evidence"
)

// ValidateCmd is `canifinetune validate`.
type ValidateCmd struct {
	File string `arg:"" optional:"" name:"cases" help:"Measured runs, one JSON object a line (format: docs/measurements-schema.md)."`

	Throughput string `placeholder:"FILE" help:"Score the plan time model's tokens/s against measured training speeds instead (format: docs/throughput-schema.md; JSON: docs/validate-throughput-json.md)."`

	Estimator       string   `default:"" help:"Estimator to score (default: the default estimator; see 'canifinetune estimate --help')."`
	Compare         []string `sep:"," placeholder:"NAME" help:"More estimators to score side by side with --estimator, on the rows all of them support."`
	Calibration     string   `placeholder:"FILE" help:"Score --estimator with the coefficients of a calibration written by 'canifinetune calibrate', on the cases inside its domain."`
	Trust           []string `sep:"," placeholder:"LEVEL" help:"Score only cases of these trust levels (high,medium,low)."`
	Method          []string `sep:"," placeholder:"METHOD" help:"Score only cases of these methods (full,lora,qlora)."`
	CrossValidation string   `name:"cross-validation" placeholder:"FILE" help:"Show the leave-one-source-family-out figures stored in FILE by 'calibrate --cross-validation-output' first (default: crossval.json beside the cases file, when its cohort is that file)."`
	By              []string `sep:"," placeholder:"FIELD" help:"Also break the error down by these case fields, one table each (model_type, model, method, precision, grad_ckpt, attn, optimizer, framework, seq_len, batch, grad_accum, measured_as); join fields with + to group on their combination (method+grad_ckpt)."`
	Cases           bool     `help:"Print every case: measured and estimated peak, error, verdict, components, why a case is unsupported."`
	JSON            bool     `help:"Print JSON (schema: docs/validate-json.md); it always holds every case."`
}

// Help implements kong's HelpProvider.
func (c *ValidateCmd) Help() string {
	return `Estimates every measured run with its own configuration and compares the
estimate with the measured peak of the same kind (allocated, active, reserved
or process). Prints the error overall and by method, source (framework) and
trust; the verdicts against the outcomes with matched yes/no denominators; and
every case that could not be estimated, grouped by reason.

On the development cohort it first shows how the fit generalises: each
source family (the case id without its number) scored with coefficients
fitted without it, beside the fitted figures and the best reference
estimator on the same rows, and which targets each family misses. Those
figures come from crossval.json beside the cases file (or --cross-validation
FILE), written by:
  canifinetune calibrate evidence/dev.jsonl -o estimate/coefficients.json \
    --cross-validation-output evidence/crossval.json

Examples:
  canifinetune validate evidence/dev.jsonl --trust high,medium
  canifinetune validate dev.jsonl --compare seed000,unsloth --cases
  canifinetune validate dev.jsonl --estimator seed000 --json
  canifinetune validate evidence/oracle.jsonl --by model_type,method,grad_ckpt,attn,precision

Errors are signed: (estimated − measured) / measured; negative is an
under-estimate, the direction that ends in an OOM. Fields a case leaves null
are filled from its framework's defaults, and each case says which.

With --calibration FILE, --estimator uses the calibration's coefficients on
the cases inside its domain (model types, methods, stacks, GPU memory) and its
embedded ones elsewhere; the report says how many cases were calibrated and why
the others were not. Add --compare with the same estimator to see both.

With --throughput FILE (and no cases file), scores the time model of 'plan'
instead: tokens/s predicted for each measured run's configuration at the
default model-FLOPs utilisation against the measured tokens/s, with the
median and p90 |error| overall, per framework, per GPU and per framework on
a GPU, and the utilisation that would centre each group's errors:
  canifinetune validate --throughput evidence/throughput.jsonl

Exit codes: 0 scored, 1 unreadable or malformed cases or calibration file,
2 usage.`
}

var (
	trustLevels = []string{"high", "medium", "low"}
	methods     = []string{"full", "lora", "qlora"}
)

// Run implements the command.
func (c *ValidateCmd) Run(env *Env) error {
	if c.Throughput != "" || c.File == "" {
		return c.runThroughput(env)
	}
	filter, err := c.filter()
	if err != nil {
		return err
	}
	by, err := byGroupings(c.By)
	if err != nil {
		return err
	}
	ests, err := c.estimators()
	if err != nil {
		return err
	}
	var cal *evidence.Calibration
	if c.Calibration != "" {
		if cal, err = readCalibration(c.Calibration); err != nil {
			return err
		}
		// Only --estimator is calibrated, so that --compare with the same
		// estimator sets the calibrated and the embedded coefficients side by side.
		if ests[0].Name() != cal.Estimator {
			return usageErrorf("canifinetune validate "+c.File+" --estimator "+cal.Estimator+" --calibration "+c.Calibration,
				"--calibration %s calibrates the %s estimator, not %s", c.Calibration, cal.Estimator, ests[0].Name())
		}
		ests[0] = evidence.Calibrated{Cal: cal, File: filepath.Base(c.Calibration)}
	}
	all, err := readCasesFile(c.File)
	if err != nil {
		return err
	}
	cases := filter.Select(all)
	if len(cases) == 0 {
		return usageErrorf("canifinetune validate "+c.File+"  (without --trust / --method)",
			"%s: none of its %d cases matches %s", c.File, len(all), c.filterFlags())
	}
	reps := make([]evidence.Report, 0, len(ests))
	for _, e := range ests {
		reps = append(reps, evidence.Score(cases, e))
	}
	out, err := newValidateJSON(c.File, len(all), filter, cases, reps)
	if err != nil {
		return err
	}
	for i, r := range reps {
		out.Estimators[i].By = byJSON(by, cases, r)
	}
	if cal != nil {
		out.Calibration = newCalibrationJSON(c.Calibration, cal, cases)
	}
	// The stored cross-validation describes the default estimator with its
	// embedded coefficients, so it is shown only when that one is scored.
	if cal == nil && ests[0].Name() == estimate.Default {
		cv, path, err := findCrossValidation(c.File, c.CrossValidation)
		if err != nil {
			return err
		}
		if cv != nil {
			out.CrossValidation = newCrossValidationJSON(path, cv)
		}
	}
	if c.JSON {
		return writeJSON(env.Stdout, out)
	}
	printValidate(env.Stdout, out, c.filterFlags(), c.Cases)
	for _, r := range out.Estimators {
		printBy(env.Stdout, by, r)
	}
	return nil
}

// filter checks --trust and --method and turns them into a row filter.
func (c *ValidateCmd) filter() (evidence.Filter, error) {
	for _, t := range c.Trust {
		if !slices.Contains(trustLevels, t) {
			return evidence.Filter{}, usageErrorf("--trust high,medium", "--trust %q: want one or more of %s", t, strings.Join(trustLevels, ","))
		}
	}
	for _, m := range c.Method {
		if !slices.Contains(methods, m) {
			return evidence.Filter{}, usageErrorf("--method lora,qlora", "--method %q: want one or more of %s", m, strings.Join(methods, ","))
		}
	}
	return evidence.Filter{Trust: c.Trust, Method: c.Method}, nil
}

// filterFlags is how the filters read on the command line ("" when none).
func (c *ValidateCmd) filterFlags() string {
	var fs []string
	if len(c.Trust) > 0 {
		fs = append(fs, "--trust "+strings.Join(c.Trust, ","))
	}
	if len(c.Method) > 0 {
		fs = append(fs, "--method "+strings.Join(c.Method, ","))
	}
	return strings.Join(fs, " ")
}

// estimators resolves --estimator followed by the --compare names. A name may
// repeat: an estimator compared with itself must show identical columns, which
// is how the same-observation restriction is checked.
func (c *ValidateCmd) estimators() ([]estimate.Estimator, error) {
	names := append([]string{c.Estimator}, c.Compare...)
	var out []estimate.Estimator
	for i, n := range names {
		if i > 0 && strings.TrimSpace(n) == "" {
			return nil, usageErrorf("--compare "+strings.Join(estimate.Names(), ","), "--compare %q: an empty estimator name", strings.Join(c.Compare, ","))
		}
		e, err := estimate.ByName(strings.TrimSpace(n))
		if err != nil {
			flag := "--estimator"
			if i > 0 {
				flag = "--compare"
			}
			return nil, usageErrorf(flag+" "+strings.Join(estimate.Names(), ","), "%s: %v", flag, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// readCalibration reads --calibration with evidence.ParseCalibration. Unlike
// loadCalibration (estimate's), it returns the calibration itself: validate
// reports on which cases its domain let it apply. A missing or malformed file
// is a bad input file (exit 1).
func readCalibration(path string) (*evidence.Calibration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, withHint(ExitError, fmt.Errorf("read calibration: %w", err), "canifinetune calibrate CASES.jsonl -o "+path)
	}
	cal, err := evidence.ParseCalibration(b, path)
	if err != nil {
		return nil, withCode(ExitError, err)
	}
	return cal, nil
}
