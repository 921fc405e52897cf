package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/alecthomas/kong"

	"github.com/canifinetune/canifinetune/modelsource"
)

// Exit codes. They are documented in the README and stable: scripts branch on them.
const (
	ExitOK       = 0 // success; for estimate: the run fits (verdict yes)
	ExitError    = 1 // a runtime error: unreadable file, malformed input, failed probe
	ExitUsage    = 2 // bad flags or values: fix the command line
	ExitMarginal = 3 // estimate: verdict marginal (0.85 < ratio ≤ 0.97)
	ExitNoFit    = 4 // estimate: verdict no (ratio > 0.97)
	ExitNoGPU    = 5 // doctor: no GPU found on this machine
	ExitOOM      = 6 // bench: the probe ran out of GPU memory (the setting does not fit, measured)
	// bench stopped by a signal, the receipt written: 128 + the signal's
	// number, the code a shell reports for a process the signal killed.
	ExitInterrupted = 130 // SIGINT (Ctrl-C)
	ExitTerminated  = 143 // SIGTERM (timeout, Slurm, docker stop)
)

// Env carries everything a command needs from the outside world, so a test can
// inject fakes: streams, environment variables, the working directory.
type Env struct {
	Stdout io.Writer
	Stderr io.Writer
	Stdin  io.Reader
	Getenv func(string) string
	// IsTerminal reports whether Stdout is a terminal (tables get no colour otherwise).
	IsTerminal bool
	// ErrIsTerminal reports whether Stderr is a terminal: progress lines are
	// written only then, so logs and pipes stay clean.
	ErrIsTerminal bool
	// Hub returns the source of Hub models (config.json and safetensors
	// headers); nil means the real Hub client configured from Getenv.
	// Tests inject a fake.
	Hub func(hubOptions) (modelsource.Source, error)
}

// OSEnv is the Env of the real process.
func OSEnv() Env {
	return Env{Stdout: os.Stdout, Stderr: os.Stderr, Stdin: os.Stdin, Getenv: os.Getenv,
		IsTerminal: isTerminal(os.Stdout), ErrIsTerminal: isTerminal(os.Stderr),
		Hub: func(o hubOptions) (modelsource.Source, error) { return newHubClient(os.Getenv, o) }}
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Root is the command tree. Each command lives in its own file with a Run(*Env) error.
type Root struct {
	Version kong.VersionFlag `help:"Print the tool's version (and each estimator's) and exit."`

	// Commands are added here, one line each, in the order `--help` lists them.
	Estimate  EstimateCmd  `cmd:"" help:"Estimate the peak GPU memory of a fine-tuning step and whether it fits."`
	Plan      PlanCmd      `cmd:"" help:"Search the configurations that fit on your GPUs and rank them by modelled time to train and cost."`
	Models    ModelsCmd    `cmd:"" help:"List the embedded model catalog."`
	GPUs      GPUsCmd      `cmd:"" name:"gpus" help:"List the embedded GPU table (memory as the driver reports it)."`
	Doctor    DoctorCmd    `cmd:"" name:"doctor" help:"Show this machine's GPUs, what holds their memory, the Python training stack, and what will go wrong."`
	Validate  ValidateCmd  `cmd:"" help:"Score estimators against measured runs (JSON Lines): error by method, source and trust; verdicts against outcomes."`
	Calibrate CalibrateCmd `cmd:"" help:"Fit the default estimator's coefficients on measured cases and write a calibration file."`
	Bench     BenchCmd     `cmd:"" help:"Run a bounded training probe on this GPU, measure the real peak and write a receipt."`
	Trace     TraceCmd     `cmd:"" help:"Where a training step's GPU time goes, from a PyTorch profiler (Kineto) trace."`
	Serve     ServeCmd     `cmd:"" help:"Serve the calculator as a local web page, with a JSON API over the same library calls."`

	Completion CompletionCmd `cmd:"" help:"Print a shell completion script (bash, zsh or fish)."`
	Help       HelpCmd       `cmd:"" help:"Show the help of a command: 'canifinetune help estimate'."`
}

// exitError is an error with an exit code and an optional hint ("Try: …").
type exitError struct {
	code int
	err  error
	hint string
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

// usageErrorf is a usage error (exit 2) with a hint telling the user what to try.
func usageErrorf(hint, format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...), hint: hint}
}

// verdictExit exits with a verdict's code and prints nothing more: the
// verdict is already in the output.
func verdictExit(code int) error { return &exitError{code: code} }

// withCode wraps err so that Main exits with code.
func withCode(code int, err error) error { return &exitError{code: code, err: err} }

// kongExit is panicked by kong's Exit hook so Main can return the code instead of exiting.
type kongExit int

// Main parses args, runs the command and returns the process exit code.
func Main(args []string, env Env) (code int) {
	var root Root
	opts := append(numberMappers(),
		kong.Name("canifinetune"),
		kong.Description("Will this fine-tuning run fit on my GPU, what do I change if it doesn't, and how far off was the estimate?"),
		kong.Writers(env.Stdout, env.Stderr),
		kong.Exit(func(c int) { panic(kongExit(c)) }),
		kong.Vars{"version": versionLine()},
		vocabularyVars(),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true, WrapUpperBound: 100}),
	)
	parser, err := kong.New(&root, opts...)
	if err != nil {
		fmt.Fprintf(env.Stderr, "canifinetune: internal error: %v\n", err)
		return ExitError
	}
	defer func() {
		if r := recover(); r != nil {
			c, ok := r.(kongExit)
			if !ok {
				panic(r)
			}
			code = int(c)
		}
	}()
	kctx, err := parser.Parse(args)
	if err != nil {
		fmt.Fprintf(env.Stderr, "canifinetune: %v\n", err)
		if h := valueHint(err.Error()); h != "" {
			fmt.Fprintf(env.Stderr, "%s\n", h)
		}
		var pe *kong.ParseError
		if errors.As(err, &pe) && pe.Context != nil {
			fmt.Fprintf(env.Stderr, "Try: canifinetune %s --help\n", strings.TrimSpace(commandPath(pe.Context)))
		} else {
			fmt.Fprintln(env.Stderr, "Try: canifinetune --help")
		}
		return ExitUsage
	}
	if err := kctx.Run(&env, parser); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.err != nil {
				fmt.Fprintf(env.Stderr, "canifinetune: %v\n", ee.err)
			}
			if ee.hint != "" {
				fmt.Fprintf(env.Stderr, "Try: %s\n", ee.hint)
			}
			return ee.code
		}
		fmt.Fprintf(env.Stderr, "canifinetune: %v\n", err)
		return ExitError
	}
	return ExitOK
}

func commandPath(ctx *kong.Context) string {
	var parts []string
	for _, p := range ctx.Path {
		if p.Command != nil {
			parts = append(parts, p.Command.Name)
		}
	}
	return strings.Join(parts, " ")
}
