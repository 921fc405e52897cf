package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/canifinetune/canifinetune/catalog"
	"github.com/canifinetune/canifinetune/hfconfig"
	"github.com/canifinetune/canifinetune/internal/checked"
	"github.com/canifinetune/canifinetune/internal/hub"
	"github.com/canifinetune/canifinetune/internal/localfile"
)

// ModelFlags are the flags of every command that takes a model: where the
// model may come from. Commands embed them so the flags read the same
// everywhere.
type ModelFlags struct {
	Revision string `help:"Hub branch, tag or commit of the model (or write the id as org/name@revision)."`
	Offline  bool   `help:"Use only the embedded catalog and the Hugging Face cache; never the network (also HF_HUB_OFFLINE=1)."`
	Hub      bool   `help:"Read config.json and safetensors headers from the Hub (or its cache) even for a catalog model, for exact parameter counts."`
}

// modelSource gives a Hub model's config.json and safetensors headers. The
// CLI uses *hub.Client; tests inject a fake.
type modelSource interface {
	Model(ctx context.Context, id, revision string) (*hub.Model, error)
}

// hubOptions is what a command decides about Hub access; the source reads
// everything else (HF_ENDPOINT, HF_TOKEN, HF_HOME, HF_HUB_OFFLINE) itself.
type hubOptions struct {
	// Offline forbids the network, from --offline.
	Offline bool
	// Progress receives per-shard progress lines; nil for none.
	Progress io.Writer
}

// newHubClient is the real modelSource: a hub.Client configured from the
// environment the way huggingface_hub is, with the command's choices on top.
func newHubClient(getenv func(string) string, o hubOptions) (modelSource, error) {
	c, err := hub.NewFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	c.Offline = c.Offline || o.Offline
	c.Progress = o.Progress
	return c, nil
}

// hubSource returns the Env's model source, or the real Hub client when the
// Env names none (an Env built by hand, as the README test does).
func (env *Env) hubSource(o hubOptions) (modelSource, error) {
	if env.Hub != nil {
		return env.Hub(o)
	}
	getenv := env.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	return newHubClient(getenv, o)
}

// envOffline reads HF_HUB_OFFLINE as huggingface_hub does.
func envOffline(getenv func(string) string) bool {
	if getenv == nil {
		return false
	}
	switch strings.ToUpper(strings.TrimSpace(getenv("HF_HUB_OFFLINE"))) {
	case "1", "ON", "YES", "TRUE":
		return true
	}
	return false
}

// Where a model came from, as estimate --json reports it in model.from.
const (
	fromLocal    = "local"
	fromCatalog  = "catalog"
	fromHub      = "hub"
	fromHubCache = "hub cache"
)

// Where a parameter count came from, as estimate --json reports it in
// model.params_source.
const (
	paramsFromSafetensors = "safetensors"
	paramsFromConfig      = "config"
)

// exactMismatchTolerance is how far the exact count may drift from the
// config-derived one before the report says so: issue 4 holds the config
// parser to 0.5 %, so more is a shape the parser missed (a vision tower, an
// MTP layer, extra buffers) or a checkpoint unlike its config.
const exactMismatchTolerance = 0.005

// resolvedModel is a model named on the command line, parsed.
type resolvedModel struct {
	Name  string // what the user typed
	ID    string // the catalog id, Hub id, or the local path
	Where string // fromLocal, fromCatalog, fromHub, fromHubCache
	// Entry is the catalog entry used ("" when not from the catalog).
	Entry  string
	Source string
	// Revision and Commit are the Hub revision asked for and the commit it
	// resolved to; empty when the model did not come from the Hub.
	Revision, Commit string
	Model            *hfconfig.Model
	// ExactParams is the count from safetensors headers; 0 when not read.
	ExactParams int64
	// ConfigParams is the count config.json's shapes imply.
	ConfigParams int64
	// Shards is the number of safetensors files whose headers were read.
	Shards int
	// Notes are facts about the count the report should carry: an exact
	// count far from the config's, a revision the catalog ignores.
	Notes []string
}

// ParamsSource says which count the estimate used: paramsFromSafetensors
// or paramsFromConfig.
func (rm *resolvedModel) ParamsSource() string {
	if rm.ExactParams > 0 {
		return paramsFromSafetensors
	}
	return paramsFromConfig
}

// resolveModel finds a model the way transformers does, in this order: an
// existing local path (a directory holding config.json, whose *.safetensors
// headers give exact counts, or a config.json file); the embedded catalog
// (unless --hub); the Hub or its cache for org/name[@revision]. Warnings
// that do not stop the answer go to env.Stderr.
func resolveModel(ctx context.Context, env *Env, name string, f ModelFlags) (*resolvedModel, error) {
	if name == "" {
		return nil, usageErrorf("canifinetune models", "no model given")
	}
	if looksLikePath(name) {
		if f.Revision != "" || f.Hub {
			return nil, usageErrorf("canifinetune estimate org/name --revision REV", "%s is a local path: --revision and --hub apply to Hub ids", name)
		}
		return resolveLocal(env, name)
	}
	id, rev, err := splitRevision(name, f.Revision)
	if err != nil {
		return nil, err
	}
	offline := f.Offline || envOffline(env.Getenv)
	entry, catErr := catalog.Lookup(id)
	if catErr != nil && !errors.Is(catErr, catalog.ErrNotFound) {
		return nil, catErr
	}
	inCatalog := catErr == nil
	if inCatalog && !f.Hub {
		rm, err := fromCatalogEntry(name, entry)
		if err != nil {
			return nil, err
		}
		if rev != "" && rev != "main" {
			rm.Notes = append(rm.Notes, fmt.Sprintf("revision %q not checked: the catalog holds one revision of %s; pass --hub for that revision's own config and exact counts", rev, entry.ID))
		}
		return rm, nil
	}
	// transformers accepts legacy ids without an org ("gpt2"), but a bare
	// name that is not in the catalog is far more often a typo than a Hub
	// repo: say what the catalog has rather than ask the Hub.
	if !inCatalog && !strings.Contains(id, "/") {
		return nil, withHint(ExitUsage, catErr, "canifinetune models  (the catalog), a Hub id as org/name, or a local directory holding config.json")
	}
	progress := io.Writer(nil)
	if env.ErrIsTerminal {
		progress = env.Stderr
	}
	src, err := env.hubSource(hubOptions{Offline: f.Offline, Progress: progress})
	if err != nil {
		return nil, withHint(ExitUsage, err, "fix the Hugging Face environment variables (HF_ENDPOINT, HF_HOME, HF_TOKEN_PATH)")
	}
	hm, err := src.Model(ctx, id, rev)
	if err != nil {
		if inCatalog && errors.Is(err, hub.ErrOffline) {
			// --hub asked for more than the catalog, but offline the
			// catalog is the best answer there is: say so and use it.
			fmt.Fprintf(env.Stderr, "canifinetune: warning: %s is not in the Hugging Face cache (offline); using the catalog's config and its config-derived count\n", id)
			return fromCatalogEntry(name, entry)
		}
		return nil, hubFailure(id, err, catErr, offline)
	}
	return fromHubModel(env, name, hm)
}

// splitRevision separates "org/name@rev" and reconciles it with --revision.
func splitRevision(name, flagRev string) (id, rev string, err error) {
	id = strings.TrimRight(strings.TrimSpace(name), "/")
	if i := strings.LastIndex(id, "@"); i >= 0 {
		id, rev = id[:i], id[i+1:]
		if rev == "" {
			return "", "", usageErrorf("org/name@main", "%s: empty revision after '@'", name)
		}
	}
	switch {
	case rev != "" && flagRev != "" && rev != flagRev:
		return "", "", usageErrorf("org/name@REV  or  --revision REV, not both", "%s names revision %q but --revision is %q", name, rev, flagRev)
	case rev == "":
		rev = flagRev
	}
	return id, rev, nil
}

func fromCatalogEntry(name string, e catalog.Entry) (*resolvedModel, error) {
	m, err := hfconfig.Parse(e.Config)
	if err != nil {
		return nil, fmt.Errorf("catalog entry %s: %w", e.ID, err)
	}
	return &resolvedModel{Name: name, ID: e.ID, Where: fromCatalog, Entry: e.ID, Source: e.Source, Model: m, ConfigParams: m.ConfigParams()}, nil
}

// hubFailure turns a Hub error into the message and exit code the user
// sees: an id the Hub could not hold is a usage error (2); a gated, private,
// missing, rate-limited or uncached model is an error (1) with the Hub
// client's hint as "Try:". The hint is not repeated in the message.
func hubFailure(id string, err, catErr error, offline bool) error {
	var he *hub.Error
	if !errors.As(err, &he) {
		return fmt.Errorf("model %s: %w", id, err)
	}
	msg := hubMessage(he)
	hint := he.Hint
	switch {
	case errors.Is(err, hub.ErrInvalidID):
		return withHint(ExitUsage, fmt.Errorf("model %s: %s", id, msg), hint)
	case errors.Is(err, hub.ErrOffline):
		what := "it is not in the embedded catalog, and the Hugging Face cache does not hold it"
		if he.File != "" {
			what = fmt.Sprintf("the Hugging Face cache lacks its %s", he.File)
		}
		why := "offline"
		if offline {
			why = "offline (--offline or HF_HUB_OFFLINE)"
		}
		if he.Message != "" {
			what += " (" + he.Message + ")"
		}
		return withHint(ExitError, fmt.Errorf("model %s is not available %s: %s", id, why, what),
			"run once online (drop --offline, unset HF_HUB_OFFLINE) to cache it, or pick a catalog model: canifinetune models")
	}
	msg = fmt.Sprintf("model %s: %s", id, msg)
	if catErr != nil && (errors.Is(err, hub.ErrNotFound) || errors.Is(err, hub.ErrUnauthorized)) {
		// Missing from both: most likely a typo, which the catalog's
		// closest ids fix.
		msg += "; it is not in the embedded catalog either"
		if s := catalog.Suggest(id, 3); len(s) > 0 {
			msg += " (closest: " + strings.Join(s, ", ") + ")"
		}
		hint += "; or pick a catalog model: canifinetune models"
	}
	return withHint(ExitError, errors.New(msg), hint)
}

// hubMessage is a hub.Error without its repo, which the caller names, and
// its hint, which Main prints as "Try:".
func hubMessage(he *hub.Error) string {
	if he.File != "" {
		return he.File + ": " + he.Cause()
	}
	return he.Cause()
}

// fromHubModel parses a Hub model's config and takes its exact counts.
func fromHubModel(env *Env, name string, hm *hub.Model) (*resolvedModel, error) {
	m, err := hfconfig.Parse(hm.ConfigJSON)
	if err != nil {
		return nil, fmt.Errorf("config.json of %s@%s: %w", hm.ID, hm.Revision, err)
	}
	rm := &resolvedModel{Name: name, ID: hm.ID, Where: fromHub, Revision: hm.Revision, Commit: hm.Commit, Model: m}
	if hm.FromCache {
		rm.Where = fromHubCache
	}
	rm.Source = "Hub " + hm.ID + "@" + hm.Revision
	if hm.Commit != "" && hm.Commit != hm.Revision {
		rm.Source += " (commit " + hm.Commit + ")"
	}
	if hm.FromCache {
		rm.Source += ", from the Hugging Face cache"
	}
	warn(env, hm.ID, hm.Warnings)
	if err := useExactCounts(rm, hm); err != nil {
		return nil, err
	}
	return rm, nil
}

// resolveLocal reads a local config.json, and the safetensors headers beside
// it when a directory holds any (never the weights).
func resolveLocal(env *Env, name string) (*resolvedModel, error) {
	path := name
	dir := ""
	if isDir(path) {
		dir = path
		path = filepath.Join(path, "config.json")
	}
	if dir != "" && hasSafetensors(dir) {
		hm, err := hub.LocalModel(dir)
		if err != nil {
			// A directory without config.json is the wrong thing to name
			// (usage); a missing shard is an incomplete checkpoint (error).
			var pe *fs.PathError
			if errors.As(err, &pe) && errors.Is(err, fs.ErrNotExist) && pe.Path == path {
				return nil, withHint(ExitUsage, err, "pass a directory holding config.json, a config.json file, or a Hub id such as Qwen/Qwen2.5-7B")
			}
			return nil, err
		}
		m, err := hfconfig.Parse(hm.ConfigJSON)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		rm := &resolvedModel{Name: name, ID: name, Where: fromLocal, Source: path, Model: m}
		warn(env, name, hm.Warnings)
		if err := useExactCounts(rm, hm); err != nil {
			return nil, err
		}
		return rm, nil
	}
	// Only a regular file, and no larger than the Hub client would
	// download: a FIFO would block, /dev/zero would exhaust memory.
	b, err := localfile.ReadFile(path, localfile.MaxJSON)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, withHint(ExitUsage, fmt.Errorf("model %s: no such file %s", name, path), "pass a directory holding config.json, a config.json file, or a Hub id such as Qwen/Qwen2.5-7B")
		}
		return nil, fmt.Errorf("model %s: %w", name, err)
	}
	m, err := hfconfig.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &resolvedModel{Name: name, ID: name, Where: fromLocal, Source: path, Model: m, ConfigParams: m.ConfigParams()}, nil
}

// hasSafetensors reports whether dir holds weights whose headers give exact
// counts: an index or any *.safetensors file.
func hasSafetensors(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors.index.json")); err == nil {
		return true
	}
	m, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	return len(m) > 0
}

// useExactCounts makes the safetensors count the model's parameter count,
// and notes when it is far from what config.json implies. A count past the
// bound every parameter count shares is an error, whatever built it: as an
// int64 it could be negative, and an estimate of a negative model fits.
func useExactCounts(rm *resolvedModel, hm *hub.Model) error {
	m := rm.Model
	rm.ConfigParams = m.ConfigParams()
	if hm.Tensors == nil || hm.Tensors.Parameters == 0 {
		return nil
	}
	if n := hm.Tensors.Parameters; !checked.Parameters(n) {
		return fmt.Errorf("%s: the safetensors headers count %d parameters, more than 10^15: the checkpoint is corrupt", rm.Source, n)
	}
	rm.Shards = len(hm.Shards)
	// GPTQ and AWQ store weights as int32 words holding 8 4-bit values
	// each, plus zeros and scales: counting their elements is not counting
	// parameters, so the config's shapes are the better count.
	if pq := m.PreQuantized; pq != nil && (pq.Method == "gptq" || pq.Method == "awq") {
		rm.Notes = append(rm.Notes, fmt.Sprintf("the checkpoint is %s-packed: its safetensors element count (%d) is not a parameter count, so the config-derived %d is used",
			pq.Method, hm.Tensors.Parameters, rm.ConfigParams))
		return nil
	}
	// Counts.Parameters already counts bitsandbytes 4-bit weights as two
	// parameters per stored byte and leaves out their quantization
	// constants, so it is the logical count a config describes.
	exact := int64(hm.Tensors.Parameters)
	rm.ExactParams = exact
	m.ExactParams = exact
	if rm.ConfigParams > 0 {
		diff := float64(exact-rm.ConfigParams) / float64(rm.ConfigParams)
		if diff > exactMismatchTolerance || diff < -exactMismatchTolerance {
			rm.Notes = append(rm.Notes, fmt.Sprintf("the safetensors headers count %d parameters, %+.2f %% from the %d that config.json implies; the exact count is used (tensors the config does not describe: a vision tower, extra layers, buffers)",
				exact, 100*diff, rm.ConfigParams))
		}
	}
	return nil
}

// warn prints problems that did not stop the answer.
func warn(env *Env, what string, warnings []string) {
	for _, w := range warnings {
		fmt.Fprintf(env.Stderr, "canifinetune: warning: %s: %s\n", what, w)
	}
}

// looksLikePath follows transformers: an existing local path wins over a Hub
// id of the same spelling; an explicit path that does not exist is an error,
// not a Hub lookup.
func looksLikePath(name string) bool {
	if _, err := os.Stat(name); err == nil {
		return true
	}
	return strings.HasPrefix(name, ".") || strings.HasPrefix(name, "/") || strings.HasPrefix(name, "~") || strings.HasSuffix(name, ".json")
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// withHint wraps err with an exit code and a "Try:" hint.
func withHint(code int, err error, hint string) error {
	return &exitError{code: code, err: err, hint: hint}
}
