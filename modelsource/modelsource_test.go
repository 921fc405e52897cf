package modelsource

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/hfconfig"
	"github.com/canifinetune/canifinetune/internal/hub"
	"github.com/canifinetune/canifinetune/internal/safetensors"
	"github.com/google/go-cmp/cmp"
)

// tinyConfig is a two-layer Llama small enough to count by hand.
const tinyConfig = `{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":64,"num_hidden_layers":2,` +
	`"num_attention_heads":4,"num_key_value_heads":2,"intermediate_size":128,"vocab_size":1000,"tie_word_embeddings":false,"torch_dtype":"bfloat16"}`

const commit = "7777777777777777777777777777777777777777"

// stubSource is a Source that records what it was asked and answers with a
// fixed model or error.
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

// open returns an Options.Open that counts how often it was called.
func open(src Source, opened *int) func() (Source, error) {
	return func() (Source, error) { *opened++; return src, nil }
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
			hm := &hub.Model{ConfigJSON: cfg, Commit: commit, Shards: []string{"a.safetensors", "b.safetensors"}}
			if c.exact > 0 {
				hm.Tensors = &safetensors.Counts{Parameters: c.exact}
			}
			var opened int
			r, err := Resolve(context.Background(), "acme/thing", Options{Revision: "v1", Open: open(&stubSource{model: hm}, &opened)})
			if err != nil {
				t.Fatal(err)
			}
			if r.From != FromHub || r.Revision != "v1" || r.Commit != commit || r.Source != "Hub acme/thing@v1 (commit "+commit+")" {
				t.Errorf("from %q revision %q commit %q source %q", r.From, r.Revision, r.Commit, r.Source)
			}
			if r.ExactParams != c.wantExact || r.Model.ExactParams != c.wantExact {
				t.Errorf("ExactParams = %d (model %d), want %d", r.ExactParams, r.Model.ExactParams, c.wantExact)
			}
			wantParams := c.wantExact
			if wantParams == 0 {
				wantParams = r.ConfigParams
			}
			if got := r.Model.Params(); got != wantParams {
				t.Errorf("Model.Params() = %d, want %d", got, wantParams)
			}
			wantSource := ParamsFromConfig
			if c.wantExact > 0 {
				wantSource = ParamsFromSafetensors
			}
			if r.ParamsSource() != wantSource {
				t.Errorf("ParamsSource = %q, want %q", r.ParamsSource(), wantSource)
			}
			notes := strings.Join(r.Notes, "\n")
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
		var opened int
		r, err := Resolve(context.Background(), "acme/thing", Options{Open: open(&stubSource{model: hm}, &opened)})
		if err == nil {
			t.Errorf("%d parameters: resolved with ExactParams %d, want an error", exact, r.ExactParams)
			continue
		}
		var re *Error
		if !strings.Contains(err.Error(), fmt.Sprint(exact)) || errors.As(err, &re) && re.Usage {
			t.Errorf("%d parameters: err = %v, want a non-usage error naming the count", exact, err)
		}
	}
}

func TestResolveOrder(t *testing.T) {
	hm := &hub.Model{ConfigJSON: []byte(tinyConfig), Tensors: &safetensors.Counts{Parameters: uint64(tinyConfigParams(t))}, Warnings: []string{"index disagrees"}}
	for _, c := range []struct {
		name         string
		model        string
		opts         Options
		srcErr       error
		wantFrom     From
		wantCalls    []string
		wantWarnings []string
		wantNotes    string
	}{
		{name: "catalog without the Hub", model: "Qwen/Qwen2.5-0.5B@main", wantFrom: FromCatalog},
		{name: "catalog ignores a revision, and says so", model: "Qwen/Qwen2.5-0.5B@v2", wantFrom: FromCatalog, wantNotes: `revision "v2" not checked`},
		{name: "an Unsloth 4-bit upload through its model's entry", model: "unsloth/Qwen2.5-0.5B-bnb-4bit", wantFrom: FromCatalog,
			wantNotes: "unsloth/Qwen2.5-0.5B-bnb-4bit is Unsloth's bitsandbytes 4-bit upload of Qwen/Qwen2.5-0.5B"},
		{name: "--hub for a catalog model", model: "Qwen/Qwen2.5-0.5B", opts: Options{Hub: true}, wantFrom: FromHub,
			wantCalls: []string{"Qwen/Qwen2.5-0.5B@"}, wantWarnings: []string{"Qwen/Qwen2.5-0.5B: index disagrees"}},
		{name: "--hub offline falls back to the catalog", model: "Qwen/Qwen2.5-0.5B", opts: Options{Hub: true, Offline: true},
			srcErr: &hub.Error{Kind: hub.ErrOffline, Repo: "Qwen/Qwen2.5-0.5B"}, wantFrom: FromCatalog, wantCalls: []string{"Qwen/Qwen2.5-0.5B@"},
			wantWarnings: []string{"Qwen/Qwen2.5-0.5B is not in the Hugging Face cache (offline); using the catalog's config and its config-derived count"}},
		{name: "not in the catalog", model: "acme/x@abc", wantFrom: FromHub, wantCalls: []string{"acme/x@abc"}, wantWarnings: []string{"acme/x: index disagrees"}},
		{name: "revision from the option", model: "acme/x", opts: Options{Revision: "r"}, wantFrom: FromHub, wantCalls: []string{"acme/x@r"}, wantWarnings: []string{"acme/x: index disagrees"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := &stubSource{model: hm, err: c.srcErr}
			var opened int
			c.opts.Open = open(src, &opened)
			r, err := Resolve(context.Background(), c.model, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			if r.From != c.wantFrom {
				t.Errorf("From = %q, want %q", r.From, c.wantFrom)
			}
			if diff := cmp.Diff(c.wantCalls, src.calls); diff != "" {
				t.Errorf("Hub calls (-want +got):\n%s", diff)
			}
			// The Hub is opened only when a model must come from it.
			if want := len(c.wantCalls); opened != want {
				t.Errorf("Open called %d times, want %d", opened, want)
			}
			if diff := cmp.Diff(c.wantWarnings, r.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			if notes := strings.Join(r.Notes, "\n"); !strings.Contains(notes, c.wantNotes) || c.wantNotes == "" && notes != "" {
				t.Errorf("notes %q, want %q", notes, c.wantNotes)
			}
		})
	}
}

// TestResolveErrors checks that each failure says whether the command line
// is wrong (Usage) and carries a hint, which the CLI turns into exit codes.
func TestResolveErrors(t *testing.T) {
	for _, c := range []struct {
		name      string
		model     string
		opts      Options
		srcErr    error
		openErr   error
		wantUsage bool
		wantErr   string
		wantHint  string
	}{
		{name: "empty", model: "", wantUsage: true, wantErr: "no model given", wantHint: "canifinetune models"},
		{name: "revision twice", model: "acme/x@a", opts: Options{Revision: "b"}, wantUsage: true, wantErr: `names revision "a" but --revision is "b"`},
		{name: "empty revision", model: "acme/x@", wantUsage: true, wantErr: "empty revision after '@'"},
		{name: "bare name not in the catalog", model: "qwen7b", wantUsage: true, wantErr: "qwen7b", wantHint: "a Hub id as org/name"},
		{name: "local path with --revision", model: "./nowhere", opts: Options{Revision: "v1"}, wantUsage: true, wantErr: "is a local path"},
		{name: "missing local path", model: "./nowhere/config.json", wantUsage: true, wantErr: "no such file ./nowhere/config.json", wantHint: "a Hub id such as"},
		{name: "broken environment", model: "acme/x", openErr: errors.New("HF_ENDPOINT: not a URL"), wantUsage: true, wantErr: "HF_ENDPOINT", wantHint: "HF_ENDPOINT, HF_HOME"},
		{name: "invalid id", model: "acme/x", srcErr: &hub.Error{Kind: hub.ErrInvalidID, Repo: "acme/x", Message: "bad", Hint: "name the model"}, wantUsage: true, wantHint: "name the model"},
		{name: "gated", model: "acme/x", srcErr: &hub.Error{Kind: hub.ErrGated, Repo: "acme/x", Status: 403, Hint: "request access"}, wantErr: "gated repo (HTTP 403)", wantHint: "request access"},
		{name: "missing from both", model: "Qwen/Qwen2.5-0.5b-typo", srcErr: &hub.Error{Kind: hub.ErrNotFound, Repo: "x", Status: 404, Hint: "check the id"},
			wantErr: "not in the embedded catalog either", wantHint: "check the id; or pick a catalog model"},
		{name: "offline, not cached", model: "acme/x", opts: Options{Offline: true}, srcErr: &hub.Error{Kind: hub.ErrOffline, Repo: "acme/x"},
			wantErr: "model acme/x is not available offline (--offline or HF_HUB_OFFLINE)", wantHint: "run once online"},
		{name: "other failure", model: "acme/x", srcErr: errors.New("disk on fire"), wantErr: "model acme/x: disk on fire"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.opts.Open = func() (Source, error) {
				return &stubSource{err: c.srcErr, model: &hub.Model{ConfigJSON: []byte(tinyConfig)}}, c.openErr
			}
			_, err := Resolve(context.Background(), c.model, c.opts)
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("err = %v, want %q", err, c.wantErr)
			}
			var re *Error
			usage, hint := false, ""
			if errors.As(err, &re) {
				usage, hint = re.Usage, re.Hint
			}
			if usage != c.wantUsage || !strings.Contains(hint, c.wantHint) {
				t.Errorf("usage %v hint %q, want usage %v hint %q", usage, hint, c.wantUsage, c.wantHint)
			}
			if re != nil && strings.Contains(err.Error(), "Try") {
				t.Errorf("the hint is repeated in the message: %v", err)
			}
		})
	}
}

// TestResolveLocal reads a config.json file and a directory whose
// safetensors headers give the exact count, never reaching the Hub.
func TestResolveLocal(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfgPath, []byte(tinyConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	noHub := func() (Source, error) { t.Error("a local model opened the Hub"); return nil, errors.New("no") }

	r, err := Resolve(context.Background(), cfgPath, Options{Open: noHub})
	if err != nil {
		t.Fatal(err)
	}
	if r.From != FromLocal || r.Source != cfgPath || r.ParamsSource() != ParamsFromConfig || r.ConfigParams != tinyConfigParams(t) {
		t.Errorf("config.json file: %+v", r)
	}
	r, err = Resolve(context.Background(), dir, Options{Open: noHub})
	if err != nil {
		t.Fatal(err)
	}
	if r.From != FromLocal || r.Source != cfgPath || r.ConfigParams != tinyConfigParams(t) {
		t.Errorf("directory without weights: %+v", r)
	}

	// One tensor of 1000 × 64 elements, declared in a safetensors header.
	header := `{"model.embed_tokens.weight":{"dtype":"BF16","shape":[1000,64],"data_offsets":[0,128000]}}`
	b := make([]byte, 8, 8+len(header)+128000)
	b[0], b[1] = byte(len(header)), byte(len(header)>>8)
	b = append(b, header...)
	b = append(b, make([]byte, 128000)...)
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err = Resolve(context.Background(), dir, Options{Open: noHub})
	if err != nil {
		t.Fatal(err)
	}
	if r.ExactParams != 64000 || r.Model.ExactParams != 64000 || r.Shards != 1 || r.ParamsSource() != ParamsFromSafetensors {
		t.Errorf("directory with weights: exact %d shards %d source %s", r.ExactParams, r.Shards, r.ParamsSource())
	}
	if notes := strings.Join(r.Notes, "\n"); !strings.Contains(notes, "the safetensors headers count 64000 parameters") {
		t.Errorf("notes %q: want the mismatch with the config named", notes)
	}

	// A directory with weights but no config.json is the wrong thing to name.
	bare := t.TempDir()
	if err := os.WriteFile(filepath.Join(bare, "model.safetensors"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Resolve(context.Background(), bare, Options{Open: noHub})
	var re *Error
	if !errors.As(err, &re) || !re.Usage {
		t.Errorf("weights without config.json: err %v, want a usage error", err)
	}
}

// TestCatalogReadsNoFile: Catalog answers from the embedded catalog even
// when a local directory has the name, and refuses what the catalog lacks.
func TestCatalogReadsNoFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.MkdirAll(filepath.Join("Qwen", "Qwen2.5-7B"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("Qwen", "Qwen2.5-7B", "config.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Catalog("Qwen/Qwen2.5-7B")
	if err != nil || r.From != FromCatalog {
		t.Fatalf("Catalog: %+v, %v", r, err)
	}
	for _, name := range []string{"", "/etc", "./Qwen/Qwen2.5-7B", "nope/nothing"} {
		var e *Error
		if _, err := Catalog(name); !errors.As(err, &e) || !e.Usage {
			t.Errorf("Catalog(%q): %v, want a usage *Error", name, err)
		}
	}
}
