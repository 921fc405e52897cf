package catalog

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/canifinetune/canifinetune/hfconfig"
	"github.com/canifinetune/canifinetune/internal/suggest"
	"path"
	"slices"
	"strings"
	"sync"
)

//go:embed models/index.json models/*/*/config.json
var files embed.FS

// ErrNotFound is returned by Lookup for an id that is neither a catalog id
// nor an alias of one.
var ErrNotFound = errors.New("model not in the embedded catalog")

// Entry is one model of the embedded catalog.
type Entry struct {
	// ID is the canonical Hugging Face Hub id, e.g. "Qwen/Qwen2.5-7B".
	ID string
	// Aliases are other ids that resolve to this entry: instruct/chat
	// variants with the same architecture, well-known mirrors and old ids.
	Aliases []string
	// Family is the display family, e.g. "Qwen2.5".
	Family string
	// Config is the config.json content.
	Config []byte
	// Verbatim is true when Config is the byte content of a real Hugging
	// Face config.json copy; false when it was re-serialised or written
	// from stated values.
	Verbatim bool
	// Source says where Config came from: "repo @ commit : path", or
	// "written from <sources>".
	Source string
	// StatedParams is a parameter count a source states (model card,
	// safetensors index total_size / bytes per parameter); 0 when none.
	StatedParams int64
	// StatedParamsExact is true when StatedParams is exact (derived from a
	// byte count), false when the source rounds it (e.g. "0.49B").
	StatedParamsExact bool
	// StatedParamsDigits is the number of significant digits a rounded
	// StatedParams keeps ("0.49B" keeps 2, "7.61B" keeps 3), so a check can
	// widen its tolerance by the rounding; 0 when exact or absent.
	StatedParamsDigits int
	// StatedParamsSource names where StatedParams comes from, and its
	// rounding when not exact.
	StatedParamsSource string
	// PreQuantized is set, by Lookup, when the name asked for is Unsloth's
	// bitsandbytes 4-bit upload of this entry's model (unsloth/<name>-bnb-4bit
	// or -unsloth-bnb-4bit): that name. The upload keeps the model's shapes
	// with its decoder Linears stored packed in nf4, so it trains as QLoRA.
	PreQuantized string
}

// indexEntry is one row of models/index.json; its config lives at
// models/<id>/config.json.
type indexEntry struct {
	ID                 string   `json:"id"`
	Aliases            []string `json:"aliases,omitempty"`
	Family             string   `json:"family"`
	Verbatim           bool     `json:"verbatim"`
	Source             string   `json:"source"`
	StatedParams       int64    `json:"stated_params,omitempty"`
	StatedParamsExact  bool     `json:"stated_params_exact,omitempty"`
	StatedParamsDigits int      `json:"stated_params_digits,omitempty"`
	StatedParamsSource string   `json:"stated_params_source,omitempty"`
}

type catalog struct {
	entries []Entry        // sorted by ID
	byName  map[string]int // lower-cased id or alias → index in entries
}

var load = sync.OnceValues(func() (*catalog, error) { return parse(files) })

// parse reads the index and the config files it names. The embedded data is
// checked by the tests, so an error here means a broken build.
func parse(fsys embed.FS) (*catalog, error) {
	raw, err := fsys.ReadFile("models/index.json")
	if err != nil {
		return nil, fmt.Errorf("read catalog index: %w", err)
	}
	var rows []indexEntry
	if err := json.Unmarshal(raw, &rows); err != nil {
		return nil, fmt.Errorf("parse catalog index: %w", err)
	}
	c := &catalog{byName: make(map[string]int)}
	for _, r := range rows {
		cfg, err := fsys.ReadFile(configPath(r.ID))
		if err != nil {
			return nil, fmt.Errorf("catalog entry %s: %w", r.ID, err)
		}
		c.entries = append(c.entries, Entry{
			ID:                 r.ID,
			Aliases:            r.Aliases,
			Family:             r.Family,
			Config:             cfg,
			Verbatim:           r.Verbatim,
			Source:             r.Source,
			StatedParams:       r.StatedParams,
			StatedParamsExact:  r.StatedParamsExact,
			StatedParamsDigits: r.StatedParamsDigits,
			StatedParamsSource: r.StatedParamsSource,
		})
	}
	slices.SortFunc(c.entries, func(a, b Entry) int { return strings.Compare(a.ID, b.ID) })
	for i, e := range c.entries {
		for _, n := range append([]string{e.ID}, e.Aliases...) {
			k := strings.ToLower(n)
			if j, dup := c.byName[k]; dup {
				return nil, fmt.Errorf("catalog: %q names both %s and %s", n, c.entries[j].ID, e.ID)
			}
			c.byName[k] = i
		}
	}
	return c, nil
}

func configPath(id string) string { return path.Join("models", id, "config.json") }

func mustLoad() *catalog {
	c, err := load()
	if err != nil {
		panic(err)
	}
	return c
}

// All returns every entry, sorted by ID. The slice is a copy; the Config
// bytes are shared and must not be modified.
func All() []Entry {
	return slices.Clone(mustLoad().entries)
}

// Normalize turns a user's model name into the form Lookup compares: it
// drops surrounding space, an "@revision" suffix and trailing slashes. Case
// is kept; Lookup ignores it.
func Normalize(name string) string {
	name = strings.TrimSpace(name)
	if i := strings.LastIndex(name, "@"); i >= 0 {
		name = name[:i]
	}
	return strings.TrimRight(name, "/")
}

// Lookup finds a model by its Hub id or an alias, ignoring case, an
// "@revision" suffix and a trailing "/". The catalog holds one revision of
// each model, so the revision is not checked. An unknown name gives an
// error wrapping ErrNotFound that suggests the closest ids.
func Lookup(name string) (Entry, error) {
	c := mustLoad()
	n := Normalize(name)
	if i, ok := c.byName[strings.ToLower(n)]; ok {
		return c.entries[i], nil
	}
	if base, ok := hfconfig.UnslothPackedBase(n); ok {
		if i, ok := c.byName[strings.ToLower(base)]; ok {
			e := c.entries[i]
			e.PreQuantized = n
			return e, nil
		}
	}
	if s := c.suggest(n, 3); len(s) > 0 {
		return Entry{}, fmt.Errorf("%w: %q; closest: %s", ErrNotFound, name, strings.Join(s, ", "))
	}
	return Entry{}, fmt.Errorf("%w: %q", ErrNotFound, name)
}

// Suggest returns up to n catalog ids closest to name, best first.
func Suggest(name string, n int) []string { return mustLoad().suggest(Normalize(name), n) }

// suggest returns up to n ids. It ranks every id and alias by edit distance, case-insensitively,
// comparing the whole name and, when the query has no org, the part after
// the "/", and favouring names that contain the query. It returns the ids
// of the entries they name, without duplicates, only when reasonably close.
func (c *catalog) suggest(name string, n int) []string {
	q := strings.ToLower(name)
	if q == "" || n <= 0 {
		return nil
	}
	qHasOrg := strings.Contains(q, "/")
	type cand struct {
		id     string
		substr bool // the query is part of the name, or the name of the query
		score  int  // edit distance, or for a substring match the length left over
	}
	best := make(map[string]cand)
	for name, i := range c.byName {
		target := name
		if !qHasOrg {
			if j := strings.Index(name, "/"); j >= 0 {
				target = name[j+1:]
			}
		}
		cd := cand{id: c.entries[i].ID, score: suggest.Distance(q, target)}
		if strings.Contains(target, q) || strings.Contains(q, target) {
			cd = cand{id: cd.id, substr: true, score: abs(len(target) - len(q))}
		}
		if prev, ok := best[cd.id]; !ok || better(cd.substr, cd.score, prev.substr, prev.score) {
			best[cd.id] = cd
		}
	}
	// A substring match names the model whatever is left over; an edit
	// distance beyond a third of the name's length is noise.
	limit := max(len(q)/3, 2)
	var cs []cand
	for _, cd := range best {
		if cd.substr || cd.score <= limit {
			cs = append(cs, cd)
		}
	}
	slices.SortFunc(cs, func(a, b cand) int {
		if a.substr != b.substr || a.score != b.score {
			if better(a.substr, a.score, b.substr, b.score) {
				return -1
			}
			return 1
		}
		return strings.Compare(a.id, b.id)
	})
	var out []string
	for _, cd := range cs[:min(len(cs), n)] {
		out = append(out, cd.id)
	}
	return out
}

// better orders suggestion candidates: substring matches first, then by score.
func better(aSub bool, aScore int, bSub bool, bScore int) bool {
	if aSub != bSub {
		return aSub
	}
	return aScore < bScore
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
