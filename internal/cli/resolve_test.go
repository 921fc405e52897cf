package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/canifinetune/canifinetune/internal/report"
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/hfconfig"
	"github.com/canifinetune/canifinetune/internal/hub"
	"github.com/canifinetune/canifinetune/internal/safetensors"
	"github.com/canifinetune/canifinetune/modelsource"
	"github.com/google/go-cmp/cmp"
)

// stubSource is a modelsource.Source that records what it was asked and answers
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
func stubEnv(src modelsource.Source, opts *[]hubOptions, vars map[string]string) (*Env, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	return &Env{
		Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string { return vars[k] },
		Hub: func(o hubOptions) (modelsource.Source, error) {
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

// TestResolveOrderAndOptions checks the CLI's side of resolution: the flags
// and the terminal reach the Hub source as hubOptions, the Hub is opened only
// for a model that must come from it, and the library's warnings are printed.
// The order and counts themselves are modelsource's tests.
func TestResolveOrderAndOptions(t *testing.T) {
	hm := &hub.Model{ConfigJSON: []byte(tinyConfig), Tensors: &safetensors.Counts{Parameters: 1000}, Warnings: []string{"index disagrees"}}
	for _, c := range []struct {
		name      string
		model     string
		flags     ModelFlags
		vars      map[string]string
		tty       bool
		wantWhere modelsource.From
		wantCalls []string
		wantOpts  []hubOptions
		wantErr   string
	}{
		{name: "catalog without the Hub", model: "Qwen/Qwen2.5-0.5B@main", wantWhere: modelsource.FromCatalog},
		{name: "catalog offline", model: "Qwen/Qwen2.5-0.5B", flags: ModelFlags{Offline: true}, wantWhere: modelsource.FromCatalog},
		{name: "--hub for a catalog model", model: "Qwen/Qwen2.5-0.5B", flags: ModelFlags{Hub: true}, wantWhere: modelsource.FromHub,
			wantCalls: []string{"Qwen/Qwen2.5-0.5B@"}, wantOpts: []hubOptions{{}}},
		{name: "not in the catalog", model: "acme/x@abc", wantWhere: modelsource.FromHub, wantCalls: []string{"acme/x@abc"}, wantOpts: []hubOptions{{}}},
		{name: "--offline reaches the source", model: "acme/x", flags: ModelFlags{Offline: true}, wantWhere: modelsource.FromHub,
			wantCalls: []string{"acme/x@"}, wantOpts: []hubOptions{{Offline: true}}},
		{name: "progress only on a terminal", model: "acme/x", tty: true, wantWhere: modelsource.FromHub,
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
			if rm.From != c.wantWhere {
				t.Errorf("Where = %q, want %q", rm.From, c.wantWhere)
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
			if c.wantWhere == modelsource.FromHub && !strings.Contains(errb.String(), "warning: acme/x: index disagrees") && rm.ID == "acme/x" {
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
		var got report.Estimate
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if got.Model.ParamsSource != modelsource.ParamsFromSafetensors || got.Model.Params != tinyConfigParams(t) {
			t.Errorf("model %+v: want exact count %d from safetensors", got.Model, tinyConfigParams(t))
		}
	}
}
