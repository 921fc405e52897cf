package oracle

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func fakePython(t *testing.T, name string) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the fake Pythons are sh scripts")
	}
	p, err := filepath.Abs(filepath.Join("testdata", "fakepy", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var tinyConfig = []byte(`{"model_type": "llama", "hidden_size": 64}`)

type request struct {
	Method string `json:"method"`
	SeqLen int    `json:"seq_len"`
}

func TestRunSuccess(t *testing.T) {
	sim, err := Run(context.Background(), Options{Python: fakePython(t, "ok"), ConfigJSON: tinyConfig,
		Request: request{"lora", 1024}, Model: "org/tiny", Timeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := &Simulation{
		Python: "/fake/bin/python", PythonVersion: "3.11.9",
		Versions:  map[string]string{"torch": "2.9.0", "transformers": "4.99.0", "peft": "0.17.0"},
		PeakBytes: 8000000000, PhaseBytes: map[string]int64{"forward": 6000000000, "loss": 8000000000, "backward": 7000000000, "optimizer": 2000000000},
		ParamsBytes: 1000000000, GradsBytes: 10000000, OptimizerStateBytes: 20000000, TrainableParams: 2500000, TotalParams: 500000000,
		LoRATargets: []string{"q_proj", "k_proj", "v_proj", "o_proj"}, CPUSeconds: 3.5,
	}
	var c struct {
		Model   string          `json:"model"`
		Request request         `json:"request"`
		Config  json.RawMessage `json:"config"`
	}
	if err := json.Unmarshal(sim.Case, &c); err != nil {
		t.Fatalf("case %s: %v", sim.Case, err)
	}
	// The fake echoes what Run handed it: the request, the config and the model id.
	if c.Model != "org/tiny" || c.Request != (request{"lora", 1024}) || string(c.Config) != string(tinyConfig) {
		t.Errorf("the oracle was given model %q, request %+v, config %s", c.Model, c.Request, c.Config)
	}
	sim.Case = nil
	if diff := cmp.Diff(want, sim); diff != "" {
		t.Errorf("simulation (-want +got):\n%s", diff)
	}
}

func TestRunFailures(t *testing.T) {
	tests := []struct {
		fake   string
		kind   Kind
		errHas []string
	}{
		{"missing", Missing, []string{"/usr/bin/python3 cannot import transformers (ModuleNotFoundError: No module named 'transformers'), peft ("}},
		{"refused", NotSimulated, []string{"not simulated: qlora quant 'int8' (nf4, nf4-dq and fp4"}},
		{"error", Failed, []string{"DataDependent", "Traceback"}},
		{"crash", Failed, []string{"exit status 139", "printed no result line", "Segmentation fault"}},
		{"garbage", Failed, []string{"phase_peak_bytes.loss: bad value 500"}},
		{"does-not-exist", NoPython, []string{"cannot run Python"}},
	}
	for _, tt := range tests {
		t.Run(tt.fake, func(t *testing.T) {
			sim, err := Run(context.Background(), Options{Python: fakePython(t, tt.fake), ConfigJSON: tinyConfig, Request: request{"qlora", 512}, Timeout: 20 * time.Second})
			var e *Error
			if !errors.As(err, &e) || sim != nil {
				t.Fatalf("Run = %v, %v; want an *Error", sim, err)
			}
			if e.Kind != tt.kind {
				t.Errorf("kind = %d, want %d (%v)", e.Kind, tt.kind, err)
			}
			for _, s := range tt.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
		})
	}
}

func TestRunLeavesNoFiles(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	if _, err := Run(context.Background(), Options{Python: fakePython(t, "ok"), ConfigJSON: tinyConfig, Request: request{"lora", 1}}); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(tmp)
	if len(ents) != 0 {
		t.Errorf("Run left %d entries in TMPDIR (%s...)", len(ents), ents[0].Name())
	}
}

func TestParseOutput(t *testing.T) {
	ok := `{"status": "ok", "result": {"peak_bytes": 10, "phase_peak_bytes": {"forward": 1, "loss": 10, "backward": 9, "optimizer": 2}}}`
	tests := []struct {
		name, in, errHas string
	}{
		{"last line wins", resultPrefix + `{"status": "bogus"}` + "\n" + resultPrefix + ok + "\n", ""},
		{"crlf", resultPrefix + ok + "\r\n", ""},
		{"none", "hello\n", "no result line"},
		{"bad json", resultPrefix + "{", "result line"},
		{"bad status", resultPrefix + `{"status": "fine"}`, `field status: bad value "fine"`},
		{"ok without result", resultPrefix + `{"status": "ok"}`, "without a result"},
		{"zero peak", resultPrefix + `{"status": "ok", "result": {"peak_bytes": 0}}`, "field peak_bytes: bad value 0"},
		{"phase missing", resultPrefix + `{"status": "ok", "result": {"peak_bytes": 10, "phase_peak_bytes": {"forward": 1}}}`, "phase_peak_bytes.loss"},
		{"missing nothing", resultPrefix + `{"status": "missing"}`, "names no module"},
		{"refusal without reason", resultPrefix + `{"status": "not_simulated"}`, "without a reason"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseOutput([]byte(tt.in))
			switch {
			case tt.errHas == "" && err != nil:
				t.Errorf("parseOutput: %v", err)
			case tt.errHas != "" && (err == nil || !strings.Contains(err.Error(), tt.errHas)):
				t.Errorf("parseOutput error = %v, want it to contain %q", err, tt.errHas)
			}
		})
	}
}

func FuzzParseOutput(f *testing.F) {
	f.Add([]byte(resultPrefix + `{"status": "ok", "result": {"peak_bytes": 10, "phase_peak_bytes": {"forward": 1, "loss": 10, "backward": 9, "optimizer": 2}}}`))
	f.Add([]byte(resultPrefix + `{"status": "missing", "missing": ["torch"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := parseOutput(b)
		if err != nil {
			return
		}
		sim, serr := o.simulation("python3", "")
		if (sim == nil) == (serr == nil) {
			t.Fatalf("simulation() = %v, %v: want exactly one", sim, serr)
		}
		if sim != nil && sim.PeakBytes <= 0 {
			t.Fatalf("accepted peak %d", sim.PeakBytes)
		}
	})
}

func TestPinnedVenv(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	v := "venv-" + LockHash()
	tests := []struct {
		getenv func(string) string
		want   string
	}{
		{env("HOME", "/home/ana"), "/home/ana/.cache/canifinetune/" + v},
		{env("HOME", "/home/ana", "XDG_CACHE_HOME", "/xdg"), "/xdg/canifinetune/" + v},
		{env("HOME", "/home/ana", "XDG_CACHE_HOME", "/xdg", "CANIFINETUNE_PY_CACHE", "/ci/cache"), "/ci/cache/" + v},
		{env(), ""},
	}
	for _, tt := range tests {
		if got := PinnedVenv(tt.getenv); got != tt.want {
			t.Errorf("PinnedVenv = %q, want %q", got, tt.want)
		}
	}
}

// The key is the one scripts/python-env.sh computes: sha256sum of the lock
// file, first 12 hex digits; the embedded lock is the checked-in one.
func TestLockHashMatchesFile(t *testing.T) {
	b, err := os.ReadFile("requirements.lock")
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != string(lockFile) {
		t.Fatal("embedded lock differs from requirements.lock")
	}
	if h := LockHash(); len(h) != 12 || strings.Trim(h, "0123456789abcdef") != "" {
		t.Errorf("LockHash = %q", h)
	}
}

func TestDefaultPython(t *testing.T) {
	cache := t.TempDir()
	venv := filepath.Join(cache, "venv-"+LockHash())
	look := func(name string) (string, error) {
		if name == "python3" {
			return "/usr/bin/python3", nil
		}
		return "", errors.New("not found")
	}
	get := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	got, ok := DefaultPython(get(map[string]string{"CANIFINETUNE_PY_CACHE": cache}), look)
	if !ok || got != (Interpreter{"/usr/bin/python3", "PATH"}) {
		t.Errorf("without the pinned environment: %+v, %v", got, ok)
	}
	// An environment python-env.sh has not completed is not used.
	if err := os.MkdirAll(filepath.Join(venv, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(venv, "bin", "python"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, _ := DefaultPython(get(map[string]string{"CANIFINETUNE_PY_CACHE": cache}), look); got.From != "PATH" {
		t.Errorf("incomplete environment chosen: %+v", got)
	}
	if err := os.WriteFile(filepath.Join(venv, ".complete"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := DefaultPython(get(map[string]string{"CANIFINETUNE_PY_CACHE": cache}), look); got != (Interpreter{filepath.Join(venv, "bin", "python"), "the pinned environment"}) {
		t.Errorf("pinned environment not chosen: %+v", got)
	}
	if got, _ := DefaultPython(get(map[string]string{"CANIFINETUNE_PY_CACHE": cache, "CANIFINETUNE_PYTHON": "/opt/py"}), look); got != (Interpreter{"/opt/py", "$CANIFINETUNE_PYTHON"}) {
		t.Errorf("$CANIFINETUNE_PYTHON not first: %+v", got)
	}
	if got, _ := DefaultPython(get(map[string]string{"CANIFINETUNE_VENV": "/v"}), look); got != (Interpreter{"/v/bin/python", "$CANIFINETUNE_VENV"}) {
		t.Errorf("$CANIFINETUNE_VENV: %+v", got)
	}
	if _, ok := DefaultPython(get(nil), func(string) (string, error) { return "", errors.New("no") }); ok {
		t.Error("found a Python where there is none")
	}
}
