package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/hfconfig"
	"github.com/canifinetune/canifinetune/internal/hub"
	"github.com/canifinetune/canifinetune/internal/safetensors"
	"github.com/google/go-cmp/cmp"
)

// stubSource is a modelSource that records what it was asked and answers
// with a fixed model or error.
type stubSource struct {
	model *hub.Model
	err   error
	calls []string
}

func (s *stubSource) Model(_ context.Context, id, rev string) (*hub.Model, error) {
	s.calls = append(s.calls, id+"@"+rev)
	if s.err != nil {
		return nil, s.err
	}
	m := *s.model
	m.ID, m.Revision = id, rev
	return &m, nil
}

// stubEnv is an Env whose Hub is src, recording the options it was built with.
func stubEnv(src modelSource, opts *[]hubOptions, vars map[string]string) (*Env, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	return &Env{
		Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string { return vars[k] },
		Hub: func(o hubOptions) (modelSource, error) {
			*opts = append(*opts, o)
			return src, nil
		},
	}, &out, &errb
}

func tinyConfigParams(t *testing.T) int64 {
	t.Helper()
	m, err := hfconfig.Parse([]byte(tinyConfig))
	if err != nil {
		t.Fatal(err)
	}
	return m.ConfigParams()
}

func TestResolveHubModelExactCounts(t *testing.T) {
	cfgParams := tinyConfigParams(t)
	for _, c := range []struct {
		name      string
		exact     uint64
		preQuant  string // a quantization_config method to add to the config
		wantExact int64
		wantNote  string
	}{
		{name: "equal", exact: uint64(cfgParams), wantExact: cfgParams},
		// 0.5 % is the tolerance: just inside gives no note, just outside one.
		{name: "within 0.5 %", exact: uint64(cfgParams + cfgParams/250), wantExact: cfgParams + cfgParams/250},
		{name: "beyond 0.5 %", exact: uint64(cfgParams + cfgParams/150), wantExact: cfgParams + cfgParams/150, wantNote: "+0.67 % from the"},
		{name: "gptq keeps the config count", exact: uint64(cfgParams / 6), preQuant: "gptq", wantNote: "gptq-packed"},
		{name: "no safetensors", exact: 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := []byte(tinyConfig)
			if c.preQuant != "" {
				cfg = []byte(strings.TrimSuffix(tinyConfig, "}") + `,"quantization_config":{"quant_method":"` + c.preQuant + `","bits":4}}`)
			}
			hm := &hub.Model{ConfigJSON: cfg, Commit: fakeCommit(7), Shards: []string{"a.safetensors", "b.safetensors"}}
			if c.exact > 0 {
				hm.Tensors = &safetensors.Counts{Parameters: c.exact}
			}
			var opts []hubOptions
			env, _, _ := stubEnv(&stubSource{model: hm}, &opts, nil)
			rm, err := resolveModel(context.Background(), env, "acme/thing", ModelFlags{Revision: "v1"})
			if err != nil {
				t.Fatal(err)
			}
			if rm.Where != fromHub || rm.Revision != "v1" || rm.Commit != fakeCommit(7) {
				t.Errorf("where %q revision %q commit %q", rm.Where, rm.Revision, rm.Commit)
			}
			if rm.ExactParams != c.wantExact || rm.Model.ExactParams != c.wantExact {
				t.Errorf("ExactParams = %d (model %d), want %d", rm.ExactParams, rm.Model.ExactParams, c.wantExact)
			}
			wantParams := c.wantExact
			if wantParams == 0 {
				wantParams = rm.ConfigParams
			}
			if got := rm.Model.Params(); got != wantParams {
				t.Errorf("Model.Params() = %d, want %d", got, wantParams)
			}
			wantSource := paramsFromConfig
			if c.wantExact > 0 {
				wantSource = paramsFromSafetensors
			}
			if rm.ParamsSource() != wantSource {
				t.Errorf("ParamsSource = %q, want %q", rm.ParamsSource(), wantSource)
			}
			notes := strings.Join(rm.Notes, "\n")
			if c.wantNote == "" && notes != "" || !strings.Contains(notes, c.wantNote) {
				t.Errorf("notes %q, want %q", notes, c.wantNote)
			}
		})
	}
}

// TestResolveRefusesCountsOutOfRange: a source whose count is past the
// bound every parameter count shares (a hand-built Counts, a source other
// than safetensors.Count) is an error, never a wrapped int64 that the
// estimate takes for a small or negative model and answers "yes".
func TestResolveRefusesCountsOutOfRange(t *testing.T) {
	for _, exact := range []uint64{1e15 + 1, 1 << 63, 1<<64 - 1} {
		hm := &hub.Model{ConfigJSON: []byte(tinyConfig), Shards: []string{"model.safetensors"}, Tensors: &safetensors.Counts{Parameters: exact}}
		var opts []hubOptions
		env, _, _ := stubEnv(&stubSource{model: hm}, &opts, nil)
		rm, err := resolveModel(context.Background(), env, "acme/thing", ModelFlags{})
		if err == nil {
			t.Errorf("%d parameters: resolved with ExactParams %d, want an error", exact, rm.ExactParams)
			continue
		}
		var ee *exitError
		if !strings.Contains(err.Error(), fmt.Sprint(exact)) || errors.As(err, &ee) && ee.code != ExitError {
			t.Errorf("%d parameters: err = %v, want an error (exit %d) naming the count", exact, err, ExitError)
		}
	}
}

func TestResolveOrderAndOptions(t *testing.T) {
	hm := &hub.Model{ConfigJSON: []byte(tinyConfig), Tensors: &safetensors.Counts{Parameters: 1000}, Warnings: []string{"index disagrees"}}
	for _, c := range []struct {
		name      string
		model     string
		flags     ModelFlags
		vars      map[string]string
		tty       bool
		wantWhere string
		wantCalls []string
		wantOpts  []hubOptions
		wantErr   string
	}{
		{name: "catalog without the Hub", model: "Qwen/Qwen2.5-0.5B@main", wantWhere: fromCatalog},
		{name: "catalog offline", model: "Qwen/Qwen2.5-0.5B", flags: ModelFlags{Offline: true}, wantWhere: fromCatalog},
		{name: "--hub for a catalog model", model: "Qwen/Qwen2.5-0.5B", flags: ModelFlags{Hub: true}, wantWhere: fromHub,
			wantCalls: []string{"Qwen/Qwen2.5-0.5B@"}, wantOpts: []hubOptions{{}}},
		{name: "not in the catalog", model: "acme/x@abc", wantWhere: fromHub, wantCalls: []string{"acme/x@abc"}, wantOpts: []hubOptions{{}}},
		{name: "--offline reaches the source", model: "acme/x", flags: ModelFlags{Offline: true}, wantWhere: fromHub,
			wantCalls: []string{"acme/x@"}, wantOpts: []hubOptions{{Offline: true}}},
		{name: "progress only on a terminal", model: "acme/x", tty: true, wantWhere: fromHub,
			wantCalls: []string{"acme/x@"}, wantOpts: []hubOptions{{Progress: &bytes.Buffer{}}}},
		{name: "revision twice", model: "acme/x@a", flags: ModelFlags{Revision: "b"}, wantErr: `names revision "a" but --revision is "b"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := &stubSource{model: hm}
			var opts []hubOptions
			env, _, errb := stubEnv(src, &opts, c.vars)
			env.ErrIsTerminal = c.tty
			rm, err := resolveModel(context.Background(), env, c.model, c.flags)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rm.Where != c.wantWhere {
				t.Errorf("Where = %q, want %q", rm.Where, c.wantWhere)
			}
			if diff := cmp.Diff(c.wantCalls, src.calls); diff != "" {
				t.Errorf("Hub calls (-want +got):\n%s", diff)
			}
			// Compare Progress by presence: it is env.Stderr itself.
			type shown struct{ Offline, Progress bool }
			var got, want []shown
			for _, o := range opts {
				got = append(got, shown{o.Offline, o.Progress != nil})
			}
			for _, o := range c.wantOpts {
				want = append(want, shown{o.Offline, o.Progress != nil})
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("hub options (-want +got):\n%s", diff)
			}
			if c.wantWhere == fromHub && !strings.Contains(errb.String(), "warning: acme/x: index disagrees") && rm.ID == "acme/x" {
				t.Errorf("Hub warnings not printed; stderr %q", errb.String())
			}
		})
	}
}

// TestHubErrorExitCodes checks the exit code and hint of each Hub failure
// through Main, as a script would see them.
func TestHubErrorExitCodes(t *testing.T) {
	for _, c := range []struct {
		err      error
		wantCode int
		wantErr  string
	}{
		{&hub.Error{Kind: hub.ErrInvalidID, Repo: "a/b..c", Message: "bad", Hint: "name the model"}, ExitUsage, "Try: name the model"},
		{&hub.Error{Kind: hub.ErrGated, Repo: "a/b", Status: 403, Hint: "request access"}, ExitError, "gated repo (HTTP 403)\nTry: request access"},
		{&hub.Error{Kind: hub.ErrNotFound, Repo: "a/b", Status: 404, Hint: "check the id"}, ExitError, "Try: check the id; or pick a catalog model"},
		{&hub.Error{Kind: hub.ErrRateLimited, Repo: "a/b", Status: 429, Hint: "wait"}, ExitError, "Try: wait\n"},
		{&hub.Error{Kind: hub.ErrOffline, Repo: "a/b", Hint: "x"}, ExitError, "not available offline"},
	} {
		var opts []hubOptions
		env, out, errb := stubEnv(&stubSource{err: c.err}, &opts, nil)
		code := Main([]string{"estimate", "a/b"}, *env)
		if code != c.wantCode || !strings.Contains(errb.String(), c.wantErr) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", c.err, code, errb.String(), c.wantCode, c.wantErr)
		}
		if out.Len() != 0 {
			t.Errorf("%v: stdout %q, want nothing", c.err, out.String())
		}
	}
}

// TestProgressOnTerminal runs the real Hub client against the fake Hub: a
// terminal stderr gets one progress line per shard, a pipe none.
func TestProgressOnTerminal(t *testing.T) {
	srv, err := newFakeHub()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, tty := range []bool{true, false} {
		vars := map[string]string{"HF_ENDPOINT": srv.URL, "HF_HOME": t.TempDir()}
		var out, errb bytes.Buffer
		env := Env{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return vars[k] }, ErrIsTerminal: tty}
		if code := Main([]string{"estimate", "acme/tiny-llama", "--json"}, env); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		lines := strings.Count(errb.String(), "reading safetensors headers of acme/tiny-llama")
		if want := map[bool]int{true: 2, false: 0}[tty]; lines != want {
			t.Errorf("terminal %v: %d progress lines, want %d; stderr %q", tty, lines, want, errb.String())
		}
		var got EstimateJSON
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if got.Model.ParamsSource != paramsFromSafetensors || got.Model.Params != tinyConfigParams(t) {
			t.Errorf("model %+v: want exact count %d from safetensors", got.Model, tinyConfigParams(t))
		}
	}
}
