package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"time"

	"github.com/canifinetune/canifinetune/gpu"
	"github.com/canifinetune/canifinetune/modelsource"
	"github.com/canifinetune/canifinetune/trace"
	"github.com/canifinetune/canifinetune/web"
)

// serveProbeTimeout bounds the page's GPU probe: a wedged driver makes
// nvidia-smi hang, and a page must answer.
const serveProbeTimeout = 5 * time.Second

// errServeNoHub is what a plan run by the page says if it ever asks for
// the Hub: the page serves the embedded catalog only (web checks the model
// before it runs plan, so this is a second lock, not a message users see).
var errServeNoHub = errors.New("the page serves the embedded catalog only")

// WebBackend is the command line's work for the page's plan, doctor and
// trace views. getenv is read for CANIFINETUNE_TOOL_PATH and PATH only
// (where nvidia-smi is), never for a Hugging Face token.
func WebBackend(getenv func(string) string) web.Backend {
	toolsOnly := func(k string) string {
		if k == "CANIFINETUNE_TOOL_PATH" || k == "PATH" {
			return getenv(k)
		}
		return ""
	}
	return web.Backend{
		Plan: func(args []string) ([]byte, []byte, int) {
			var out, errb bytes.Buffer
			// No Getenv: no token, no HF_HOME, no tool path; no Hub.
			env := Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" },
				Hub: func(hubOptions) (modelsource.Source, error) { return nil, errServeNoHub }}
			code := Main(append([]string{"plan", "--json"}, args...), env)
			return out.Bytes(), errb.Bytes(), code
		},
		Doctor: func(ctx context.Context) ([]byte, error) {
			env := Env{Getenv: toolsOnly}
			return serveDoctor(ctx, &env)
		},
		Trace: func(ctx context.Context, name string, r io.Reader, opts trace.Options) (*trace.Report, error) {
			return analyzeTraceStream(ctx, name, r, opts, "")
		},
	}
}

// serveDoctor is `doctor --json` without the Python probe: the GPUs within
// serveProbeTimeout, the findings that follow from them alone.
func serveDoctor(ctx context.Context, env *Env) ([]byte, error) {
	inv, err := DetectGPUs(ctx, env, serveProbeTimeout)
	if errors.Is(err, gpu.ErrNoGPU) {
		inv, err = gpu.Inventory{}, nil
	}
	if err != nil {
		return nil, err
	}
	rep := doctorReport(inv, nil, gpu.Diagnose(inv, nil))
	rep.Simulation = doctorSimulationJSON{Versions: map[string]string{}, Missing: []string{},
		Reason: "not probed by the page (it imports torch)", Hint: "canifinetune doctor"}
	var b bytes.Buffer
	if err := writeJSON(&b, rep); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
