package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/canifinetune/canifinetune/internal/atomicfile"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/evidence"
)

// CalibrateCmd is `canifinetune calibrate`.
type CalibrateCmd struct {
	Cases  string `arg:"" help:"Measured cases (JSON Lines, docs/measurements-schema.md): the development cohort to fit on."`
	Output string `short:"o" required:"" help:"Where to write the calibration (JSON)."`
	JSON   bool   `help:"Print the calibration as JSON on stdout too."`
	// CrossValidate refits once per source family with it held out.
	CrossValidate bool `name:"cross-validate" help:"Also fit once per source family (the case id without its number) with that family left out, and score the held-out rows: how the fit generalises to a source it has not seen."`
	// CrossValidationOutput stores the cross-validation for validate to show.
	CrossValidationOutput string `name:"cross-validation-output" placeholder:"FILE" help:"Write the cross-validation (implies --cross-validate) to FILE as JSON (docs/calibration-json.md); 'validate' shows a file named crossval.json beside its cases file first."`
}

// referenceEstimators are the estimators that need no fit, set against each
// left-out family.
var referenceEstimators = []string{"seed000", "unsloth"}

// Help implements kong's HelpProvider.
func (c *CalibrateCmd) Help() string {
	return `Fits the default estimator's named coefficients on a development cohort
(trust high and medium, supported, non-OOM rows) with a robust method:
Gauss–Newton steps solved by non-negative least squares on relative errors,
with Huber reweighting. Writes the coefficients, the ids of the rows used, the
residuals and the domain of validity (model types, methods, stacks, GPU memory
range). 'estimate' and 'validate' take it with --calibration and apply it only
inside its domain.

What the fake-tensor oracle determines is not fitted: the stock loss chain
(logits_bytes, fixed at 12 B per logit), LitGPT's loss chain, the saved
tensors of every layer of transformers' Llama, Mistral, Qwen2, Qwen3,
Granite, OLMo 2, StableLM, GPT-NeoX, Phi, Gemma, Gemma 2 and Phi-3 layers
(and, under autocast, the families the oracle runs with it), and of LitGPT's
own Llama, Mistral, Gemma, Gemma 2, Phi, Phi-3, GPT-NeoX and Falcon 7B
blocks without checkpointing (no activation coefficient applies to them).
The fit sets what the oracle cannot see: the caching allocator's reserved
terms, and the activation and checkpointing coefficients of the code paths
it does not imitate (checkpointed and sharded LitGPT runs, torchtune,
fsdp_qlora, remote-code and other families). context_gib is fixed.

The embedded defaults, and the leave-one-source-family-out figures that
'validate evidence/dev.jsonl' shows first, are produced by:
  canifinetune calibrate evidence/dev.jsonl -o estimate/coefficients.json \
    --cross-validation-output evidence/crossval.json`
}

// Run implements the command.
func (c *CalibrateCmd) Run(env *Env) error {
	cases, err := readCasesFile(c.Cases)
	if err != nil {
		return err
	}
	cal, err := evidence.Fit(cases, filepath.Base(c.Cases))
	if err != nil {
		return withCode(ExitError, fmt.Errorf("calibrate %s: %w", c.Cases, err))
	}
	b, err := json.MarshalIndent(cal, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteOutput(c.Output, append(b, '\n'), 0o644); err != nil {
		return err
	}
	var cv *evidence.CrossValidation
	if c.CrossValidate || c.CrossValidationOutput != "" {
		var refs []estimate.Estimator
		for _, n := range referenceEstimators {
			e, err := estimate.ByName(n)
			if err != nil {
				return err
			}
			refs = append(refs, e)
		}
		if cv, err = evidence.CrossValidate(cases, cal, refs...); err != nil {
			return withCode(ExitError, fmt.Errorf("calibrate %s: cross-validation: %w", c.Cases, err))
		}
	}
	if c.CrossValidationOutput != "" {
		b, err := json.MarshalIndent(cv, "", "  ")
		if err != nil {
			return err
		}
		if err := atomicfile.WriteOutput(c.CrossValidationOutput, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if c.JSON {
		out := struct {
			*evidence.Calibration
			CrossValidation *evidence.CrossValidation `json:"cross_validation,omitempty"`
		}{cal, cv}
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		_, err = env.Stdout.Write(append(b, '\n'))
		return err
	}
	s := cal.Summary
	fmt.Fprintf(env.Stdout, "fitted %d rows of %s → %s\n", len(cal.Rows), c.Cases, c.Output)
	fmt.Fprintf(env.Stdout, "fit residuals: median |error| %.1f %%, p90 %.1f %%, MAPE %.1f %%\n\n", s.MedianAbs, s.P90Abs, s.MAPE)
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	for _, row := range evidence.CoefficientRows(cal.Coefficients) {
		fmt.Fprintf(tw, "%s\t%.4g\t%s\n", row.Name, row.Value, row.What)
	}
	tw.Flush()
	d := cal.Domain
	fmt.Fprintf(env.Stdout, "\ndomain: model types %v; methods %v; stacks %v; GPU memory %.0f–%.0f GiB\n", d.ModelTypes, d.Methods, d.Stacks, d.GPUMemGiB[0], d.GPUMemGiB[1])
	fmt.Fprintln(env.Stdout, "Calibration fits a development cohort; it does not independently validate the resulting estimates.")
	if cv != nil {
		printCrossValidation(env, cv)
	}
	return nil
}

func printCrossValidation(env *Env, cv *evidence.CrossValidation) {
	fmt.Fprintln(env.Stdout, "\ncross-validation: each source family scored with coefficients fitted without it")
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "family\tn\theld-out MAPE\tmedian |err|\tp90 |err|\t\tin-sample MAPE\tmedian |err|\tp90 |err|\t")
	row := func(name string, h, in evidence.Summary) {
		fmt.Fprintf(tw, "%s\t%d\t%.1f%%\t%.1f%%\t%.1f%%\t\t%.1f%%\t%.1f%%\t%.1f%%\t\n", name, h.N, h.MAPE, h.MedianAbs, h.P90Abs, in.MAPE, in.MedianAbs, in.P90Abs)
	}
	for _, f := range cv.Folds {
		row(f.Family, f.Summary, f.InSample)
	}
	row("all", cv.HeldOut, cv.InSample)
	tw.Flush()
}

func readCasesFile(path string) ([]evidence.Case, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, withHint(ExitError, fmt.Errorf("cases file %s: no such file", path), "canifinetune validate evidence/dev.jsonl")
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	cases, err := evidence.ReadCases(f, path)
	if err != nil {
		return nil, withCode(ExitError, err)
	}
	if len(cases) == 0 {
		return nil, withCode(ExitError, fmt.Errorf("%s: no cases", path))
	}
	return cases, nil
}

// loadCalibration reads --calibration into an estimator that applies it
// inside its domain.
func loadCalibration(path string) (estimate.Estimator, error) {
	cal, err := readCalibration(path)
	if err != nil {
		return nil, err
	}
	return evidence.Calibrated{Cal: cal, File: filepath.Base(path)}, nil
}
