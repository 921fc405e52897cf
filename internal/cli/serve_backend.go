package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
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
		Recipe: func(args []string, rank int) (map[string][]byte, []byte, int) {
			return serveRecipe(args, rank)
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

// serveRecipe runs plan --emit into a temporary directory, as a user
// would, and reads the files back: the page's download is the command's
// output, byte for byte.
func serveRecipe(args []string, rank int) (map[string][]byte, []byte, int) {
	var out, errb bytes.Buffer
	tmp, err := os.MkdirTemp("", "canifinetune-recipe-")
	if err != nil {
		return nil, []byte("canifinetune: " + err.Error() + "\n"), ExitError
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "recipe")
	env := Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" },
		Hub: func(hubOptions) (modelsource.Source, error) { return nil, errServeNoHub }}
	// The model stays last, after "--", as the page passes it.
	flags := append([]string{"plan", "--json", "--emit=" + dir, "--emit-plan=" + strconv.Itoa(rank)}, args...)
	if code := Main(flags, env); code != ExitOK {
		return nil, errb.Bytes(), code
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, []byte("canifinetune: " + err.Error() + "\n"), ExitError
	}
	files := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, []byte("canifinetune: " + err.Error() + "\n"), ExitError
		}
		files[e.Name()] = b
	}
	return files, errb.Bytes(), ExitOK
}
