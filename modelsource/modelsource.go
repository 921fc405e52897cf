package modelsource

import (
	"context"
	"errors"
	"fmt"
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

// Source gives a Hub model's config.json and safetensors headers. The real
// one is *hub.Client; tests inject a fake.
type Source interface {
	Model(ctx context.Context, id, revision string) (*hub.Model, error)
}

// Options are what a command decides about where a model may come from.
type Options struct {
	// Revision is the Hub branch, tag or commit (--revision); a name may
	// also carry it as org/name@revision.
	Revision string
	// Hub reads config.json and safetensors headers from the Hub (or its
	// cache) even for a catalog model (--hub).
	Hub bool
	// Offline says the network is forbidden (--offline or HF_HUB_OFFLINE).
	// The Source enforces it; here it only words the error of a model the
	// cache lacks.
	Offline bool
	// Open returns the Hub source. It is called only when the model must come
	// from the Hub; an error from it is a broken environment (HF_ENDPOINT,
	// HF_HOME, HF_TOKEN_PATH).
	Open func() (Source, error)
	// Vocab, when above 0, is the vocabulary size for a config that lacks
	// one (or overrides its own): --vocab-size.
	Vocab int64
}

// From says where a model came from, as estimate --json reports it in
// model.from.
type From string

// Where a model came from.
const (
	FromLocal    From = "local"
	FromCatalog  From = "catalog"
	FromHub      From = "hub"
	FromHubCache From = "hub cache"
)

// Where a parameter count came from, as estimate --json reports it in
// model.params_source.
const (
	ParamsFromSafetensors = "safetensors"
	ParamsFromConfig      = "config"
)

// ExactMismatchTolerance is how far the exact count may drift from the
// config-derived one before a note says so: the catalog test holds the
// config parser to 0.5 % of the stated counts, so more is a shape the parser
// missed (a vision tower, an MTP layer, extra buffers) or a checkpoint
// unlike its config.
const ExactMismatchTolerance = 0.005

// Resolved is a model named on the command line, found and parsed.
type Resolved struct {
	Name string // what the user typed
	ID   string // the catalog id, Hub id, or the local path
	From From
	// Entry is the catalog entry used ("" when not from the catalog).
	Entry string
	// Source names the file, catalog entry or Hub revision the config came from.
	Source string
	// Revision and Commit are the Hub revision asked for and the commit it
	// resolved to; empty when the model did not come from the Hub.
	Revision, Commit string
	// Model is the parsed architecture; its ExactParams is set when the
	// safetensors count is used.
	Model *hfconfig.Model
	// ConfigJSON is the config.json Model was parsed from, as read.
	ConfigJSON []byte
	// ExactParams is the count from safetensors headers; 0 when not read or
	// not usable (GPTQ/AWQ packing).
	ExactParams int64
	// ConfigParams is the count config.json's shapes imply.
	ConfigParams int64
	// Shards is the number of safetensors files whose headers were read.
	Shards int
	// Notes are facts about the count a report should carry: an exact
	// count far from the config's, a revision the catalog ignores.
	Notes []string
	// Warnings are problems that did not stop the answer (a Hub index that
	// disagrees with its shards, an offline fallback to the catalog), each a
	// sentence for a "warning:" line.
	Warnings []string
}

// ParamsSource says which count the estimate uses: ParamsFromSafetensors or
// ParamsFromConfig.
func (r *Resolved) ParamsSource() string {
	if r.ExactParams > 0 {
		return ParamsFromSafetensors
	}
	return ParamsFromConfig
}

// Error is a model that could not be resolved, with what to try.
type Error struct {
	Err error
	// Hint is what to try instead, for a "Try:" line; may be empty.
	Hint string
	// Usage is true when the name or flags are wrong (the command line must
	// change), false when the world refused (the Hub, the cache, a file).
	Usage bool
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func usage(hint string, err error) error { return &Error{Err: err, Hint: hint, Usage: true} }
func usagef(hint, format string, args ...any) error {
	return usage(hint, fmt.Errorf(format, args...))
}

// pathHint is what to try when a local path names nothing usable.
const pathHint = "pass a directory holding config.json, a config.json file, or a Hub id such as Qwen/Qwen2.5-7B"

// Resolve finds the model name refers to: an existing local path; the
// embedded catalog (unless o.Hub); the Hub or its cache for
// org/name[@revision].
func Resolve(ctx context.Context, name string, o Options) (*Resolved, error) {
	if name == "" {
		return nil, usagef("canifinetune models", "no model given")
	}
	if LooksLikePath(name) {
		if o.Revision != "" || o.Hub {
			return nil, usagef("canifinetune estimate org/name --revision REV", "%s is a local path: --revision and --hub apply to Hub ids", name)
		}
		return resolveLocal(name, o.Vocab)
	}
	return ResolveID(ctx, name, o)
}

// ResolveID is Resolve for a name that is never a local path: the embedded
// catalog (unless o.Hub), then the Hub or its cache for org/name[@revision].
// A server resolving names typed by others uses it, so that no name reads a
// file of the machine it runs on.
func ResolveID(ctx context.Context, name string, o Options) (*Resolved, error) {
	if name == "" {
		return nil, usagef("canifinetune models", "no model given")
	}
	id, rev, err := splitRevision(name, o.Revision)
	if err != nil {
		return nil, err
	}
	entry, catErr := catalog.Lookup(id)
	if catErr != nil && !errors.Is(catErr, catalog.ErrNotFound) {
		return nil, catErr
	}
	inCatalog := catErr == nil
	if inCatalog && !o.Hub {
		r, err := fromCatalogEntry(name, entry, o.Vocab)
		if err != nil {
			return nil, err
		}
		if rev != "" && rev != "main" {
			r.Notes = append(r.Notes, fmt.Sprintf("revision %q not checked: the catalog holds one revision of %s; pass --hub for that revision's own config and exact counts", rev, entry.ID))
		}
		return r, nil
	}
	// transformers accepts legacy ids without an org ("gpt2"), but a bare
	// name that is not in the catalog is far more often a typo than a Hub
	// repo: say what the catalog has rather than ask the Hub.
	if !inCatalog && !strings.Contains(id, "/") {
		return nil, usage("canifinetune models  (the catalog), a Hub id as org/name, or a local directory holding config.json", catErr)
	}
	if o.Open == nil {
		return nil, fmt.Errorf("model %s: no Hub source to read it from", id)
	}
	src, err := o.Open()
	if err != nil {
		return nil, usage("fix the Hugging Face environment variables (HF_ENDPOINT, HF_HOME, HF_TOKEN_PATH)", err)
	}
	hm, err := src.Model(ctx, id, rev)
	if err != nil {
		if inCatalog && errors.Is(err, hub.ErrOffline) {
			// --hub asked for more than the catalog, but offline the
			// catalog is the best answer there is: say so and use it.
			r, cerr := fromCatalogEntry(name, entry, o.Vocab)
			if r != nil {
				r.Warnings = append(r.Warnings, fmt.Sprintf("%s is not in the Hugging Face cache (offline); using the catalog's config and its config-derived count", id))
			}
			return r, cerr
		}
		return nil, hubFailure(id, err, catErr, o.Offline)
	}
	return fromHubModel(name, hm, o.Vocab)
}

// splitRevision separates "org/name@rev" and reconciles it with --revision.
func splitRevision(name, flagRev string) (id, rev string, err error) {
	id = strings.TrimRight(strings.TrimSpace(name), "/")
	if i := strings.LastIndex(id, "@"); i >= 0 {
		id, rev = id[:i], id[i+1:]
		if rev == "" {
			return "", "", usagef("org/name@main", "%s: empty revision after '@'", name)
		}
	}
	switch {
	case rev != "" && flagRev != "" && rev != flagRev:
		return "", "", usagef("org/name@REV  or  --revision REV, not both", "%s names revision %q but --revision is %q", name, rev, flagRev)
	case rev == "":
		rev = flagRev
	}
	return id, rev, nil
}

func fromCatalogEntry(name string, e catalog.Entry, vocab int64) (*Resolved, error) {
	m, err := hfconfig.ParseWith(e.Config, hfconfig.ParseOptions{Vocab: vocab})
	if err != nil {
		return nil, fmt.Errorf("catalog entry %s: %w", e.ID, err)
	}
	m.Name = name
	return &Resolved{Name: name, ID: e.ID, From: FromCatalog, Entry: e.ID, Source: e.Source, Model: m, ConfigJSON: e.Config, ConfigParams: m.ConfigParams(), Notes: preQuantizedNotes(e)}, nil
}

// hubFailure turns a Hub error into what the user reads: an id the Hub
// could not hold is a usage error; a gated, private, missing, rate-limited
// or uncached model is an error with the Hub client's hint. The hint is not
// repeated in the message.
func hubFailure(id string, err, catErr error, offline bool) error {
	var he *hub.Error
	if !errors.As(err, &he) {
		return fmt.Errorf("model %s: %w", id, err)
	}
	msg := hubMessage(he)
	hint := he.Hint
	switch {
	case errors.Is(err, hub.ErrInvalidID):
		return usage(hint, fmt.Errorf("model %s: %s", id, msg))
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
		return &Error{Err: &hubError{msg: fmt.Sprintf("model %s is not available %s: %s", id, why, what), err: err},
			Hint: "run once online (drop --offline, unset HF_HUB_OFFLINE) to cache it, or pick a catalog model: canifinetune models"}
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
	return &Error{Err: &hubError{msg: msg, err: err}, Hint: hint}
}

// hubError is a Hub failure in the words hubFailure chose, still wrapping
// the client's error, so that a caller can branch on hub.ErrGated and the
// other sentinels (a server answers each with its own status).
type hubError struct {
	msg string
	err error
}

func (e *hubError) Error() string { return e.msg }
func (e *hubError) Unwrap() error { return e.err }

// hubMessage is a hub.Error without its repo, which the caller names, and
// its hint, which travels as Error.Hint.
func hubMessage(he *hub.Error) string {
	if he.File != "" {
		return he.File + ": " + he.Cause()
	}
	return he.Cause()
}

// fromHubModel parses a Hub model's config and takes its exact counts.
func fromHubModel(name string, hm *hub.Model, vocab int64) (*Resolved, error) {
	m, err := hfconfig.ParseWith(hm.ConfigJSON, hfconfig.ParseOptions{Vocab: vocab})
	if err != nil {
		return nil, fmt.Errorf("config.json of %s@%s: %w", hm.ID, hm.Revision, err)
	}
	m.Name = hm.ID
	r := &Resolved{Name: name, ID: hm.ID, From: FromHub, Revision: hm.Revision, Commit: hm.Commit, Model: m, ConfigJSON: hm.ConfigJSON}
	if hm.FromCache {
		r.From = FromHubCache
	}
	r.Source = "Hub " + hm.ID + "@" + hm.Revision
	if hm.Commit != "" && hm.Commit != hm.Revision {
		r.Source += " (commit " + hm.Commit + ")"
	}
	if hm.FromCache {
		r.Source += ", from the Hugging Face cache"
	}
	r.Warnings = append(r.Warnings, prefixed(hm.ID, hm.Warnings)...)
	if err := useExactCounts(r, hm); err != nil {
		return nil, err
	}
	return r, nil
}

// resolveLocal reads a local config.json, and the safetensors headers beside
// it when a directory holds any (never the weights).
func resolveLocal(name string, vocab int64) (*Resolved, error) {
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
				return nil, usage(pathHint, err)
			}
			return nil, err
		}
		m, err := hfconfig.ParseWith(hm.ConfigJSON, hfconfig.ParseOptions{Vocab: vocab})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		r := &Resolved{Name: name, ID: name, From: FromLocal, Source: path, Model: m, ConfigJSON: hm.ConfigJSON}
		r.Warnings = append(r.Warnings, prefixed(name, hm.Warnings)...)
		if err := useExactCounts(r, hm); err != nil {
			return nil, err
		}
		return r, nil
	}
	// Only a regular file, and no larger than the Hub client would
	// download: a FIFO would block, /dev/zero would exhaust memory.
	b, err := localfile.ReadFile(path, localfile.MaxJSON)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, usage(pathHint, fmt.Errorf("model %s: no such file %s", name, path))
		}
		return nil, fmt.Errorf("model %s: %w", name, err)
	}
	m, err := hfconfig.ParseWith(b, hfconfig.ParseOptions{Vocab: vocab})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &Resolved{Name: name, ID: name, From: FromLocal, Source: path, Model: m, ConfigJSON: b, ConfigParams: m.ConfigParams()}, nil
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
func useExactCounts(r *Resolved, hm *hub.Model) error {
	m := r.Model
	r.ConfigParams = m.ConfigParams()
	if hm.Tensors == nil || hm.Tensors.Parameters == 0 {
		return nil
	}
	if n := hm.Tensors.Parameters; !checked.Parameters(n) {
		return fmt.Errorf("%s: the safetensors headers count %d parameters, more than 10^15: the checkpoint is corrupt", r.Source, n)
	}
	r.Shards = len(hm.Shards)
	// GPTQ and AWQ store weights as int32 words holding 8 4-bit values
	// each, plus zeros and scales: counting their elements is not counting
	// parameters, so the config's shapes are the better count.
	if pq := m.PreQuantized; pq != nil && (pq.Method == "gptq" || pq.Method == "awq") {
		r.Notes = append(r.Notes, fmt.Sprintf("the checkpoint is %s-packed: its safetensors element count (%d) is not a parameter count, so the config-derived %d is used",
			pq.Method, hm.Tensors.Parameters, r.ConfigParams))
		return nil
	}
	// Counts.Parameters already counts bitsandbytes 4-bit weights as two
	// parameters per stored byte and leaves out their quantization
	// constants, so it is the logical count a config describes.
	exact := int64(hm.Tensors.Parameters)
	r.ExactParams = exact
	m.ExactParams = exact
	if r.ConfigParams > 0 {
		diff := float64(exact-r.ConfigParams) / float64(r.ConfigParams)
		if diff > ExactMismatchTolerance || diff < -ExactMismatchTolerance {
			r.Notes = append(r.Notes, fmt.Sprintf("the safetensors headers count %d parameters, %+.2f %% from the %d that config.json implies; the exact count is used (tensors the config does not describe: a vision tower, extra layers, buffers)",
				exact, 100*diff, r.ConfigParams))
		}
	}
	return nil
}

// prefixed names what each warning is about.
func prefixed(what string, warnings []string) []string {
	out := make([]string, 0, len(warnings))
	for _, w := range warnings {
		out = append(out, what+": "+w)
	}
	return out
}

// LooksLikePath follows transformers: an existing local path wins over a Hub
// id of the same spelling; an explicit path that does not exist is an error,
// not a Hub lookup.
func LooksLikePath(name string) bool {
	if _, err := os.Stat(name); err == nil {
		return true
	}
	return strings.HasPrefix(name, ".") || strings.HasPrefix(name, "/") || strings.HasPrefix(name, "~") || strings.HasSuffix(name, ".json")
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// Catalog resolves name in the embedded catalog only: no file is looked at
// and no network is reached, which is what a server answering names typed by
// others needs (Resolve would read a local path of that name). A name the
// catalog lacks is an *Error wrapping catalog.ErrNotFound, with the closest
// ids in its message.
func Catalog(name string) (*Resolved, error) {
	if strings.TrimSpace(name) == "" {
		return nil, usagef("canifinetune models", "no model given")
	}
	id, rev, err := splitRevision(name, "")
	if err != nil {
		return nil, err
	}
	entry, err := catalog.Lookup(id)
	if err != nil {
		return nil, usage("canifinetune models  (the catalog)", err)
	}
	r, err := fromCatalogEntry(name, entry, 0)
	if err != nil {
		return nil, err
	}
	if rev != "" && rev != "main" {
		r.Notes = append(r.Notes, fmt.Sprintf("revision %q not checked: the catalog holds one revision of %s", rev, entry.ID))
	}
	return r, nil
}

// preQuantizedNotes says, for an Unsloth 4-bit upload resolved through the
// catalog entry of the model it packs, what that means for the run.
func preQuantizedNotes(e catalog.Entry) []string {
	if e.PreQuantized == "" {
		return nil
	}
	return []string{fmt.Sprintf("%s is Unsloth's bitsandbytes 4-bit upload of %s: the same shapes, its decoder Linears stored as nf4, so it trains as --method qlora (a 16-bit LoRA or full fine-tune starts from the unquantized upload)", e.PreQuantized, e.ID)}
}
