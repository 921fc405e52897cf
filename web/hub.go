package web

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/canifinetune/canifinetune/catalog"
	"github.com/canifinetune/canifinetune/internal/hub"
	"github.com/canifinetune/canifinetune/internal/report"
	"github.com/canifinetune/canifinetune/modelsource"
)

// Hub is the Hugging Face Hub behind the page: the configs and safetensors
// headers of models the catalog lacks, and the model search. serve passes a
// *hub.Client, which keeps what it reads in the Hugging Face cache and
// never puts its token in an error; tests pass a client of a fake Hub.
type Hub interface {
	modelsource.Source
	// Search lists the Hub's model ids containing query (anonymous).
	Search(ctx context.Context, query string, limit int) ([]string, error)
	// CachedModels lists the ids the Hugging Face cache holds.
	CachedModels(query string, limit int) ([]string, error)
}

// hubTimeout bounds one model read from the Hub for a page: a model of
// hundreds of shards reads that many headers, a page must answer.
const hubTimeout = 60 * time.Second

// searchLimit is how many ids a search returns from each of the catalog and
// the Hub.
const searchLimit = 20

// HubState says where model ids beyond the catalog come from, as the page
// and /api/search word it.
type HubState struct {
	// Mode is "online" (the Hub, and its cache), "offline" (the cache
	// only: HF_HUB_OFFLINE or --offline) or "off" (the catalog only).
	Mode string `json:"mode"`
	// Note says so in a sentence.
	Note string `json:"note"`
}

func (s *Server) hubState() HubState {
	switch {
	case s.opts.Hub == nil:
		return HubState{"off", "the embedded catalog only; this server reads no model from the Hub (serve --no-hub, or no Hugging Face cache)"}
	case s.opts.Offline:
		return HubState{"offline", "offline: the embedded catalog, and Hub models already in the Hugging Face cache (the network is not used)"}
	}
	return HubState{"online", "online: the embedded catalog and the Hub; a Hub id the catalog lacks (org/name) is read from the Hub (config.json and safetensors headers, never the weights) into the Hugging Face cache"}
}

// SearchResult is the answer of /api/search.
type SearchResult struct {
	Query   string   `json:"query"`
	Catalog []string `json:"catalog"`
	// Hub is the Hub's ids (online) or the Hugging Face cache's (offline,
	// or when the Hub could not be reached), catalog ids left out.
	Hub []string `json:"hub"`
	// HubFrom says where Hub came from: "hub", "cache" or "" (none).
	HubFrom string   `json:"hub_from"`
	State   HubState `json:"hub_state"`
	// HubError is why the Hub did not answer, when it did not.
	HubError string `json:"hub_error,omitempty"`
}

// search answers q from the catalog, then the Hub (or, offline or when the
// Hub fails, the cache).
func (s *Server) search(ctx context.Context, q string) SearchResult {
	res := SearchResult{Query: q, Catalog: []string{}, Hub: []string{}, State: s.hubState()}
	lq := strings.ToLower(q)
	for _, e := range catalog.All() {
		if strings.Contains(strings.ToLower(e.ID), lq) && len(res.Catalog) < searchLimit {
			res.Catalog = append(res.Catalog, e.ID)
		}
	}
	h := s.opts.Hub
	if h == nil {
		return res
	}
	var ids []string
	var err error
	if !s.opts.Offline && len(q) >= 2 {
		if r, ok := s.searches.get(q); ok {
			ids = r
		} else {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			ids, err = h.Search(ctx, q, searchLimit+len(res.Catalog))
			cancel()
			if err == nil {
				s.searches.put(q, ids)
			}
		}
		res.HubFrom = "hub"
	}
	if s.opts.Offline || err != nil {
		if err != nil {
			res.HubError = err.Error()
		}
		ids, _ = h.CachedModels(q, searchLimit+len(res.Catalog))
		res.HubFrom = "cache"
	}
	for _, id := range ids {
		if !slices.ContainsFunc(res.Catalog, func(c string) bool { return strings.EqualFold(c, id) }) && len(res.Hub) < searchLimit {
			res.Hub = append(res.Hub, id)
		}
	}
	return res
}

func (s *Server) handleSearch(w http.ResponseWriter, r *http.Request) {
	if !getOnly(w, r) {
		return
	}
	q := r.URL.Query()
	for k, vs := range q {
		if k != "q" {
			writeProblem(w, badParam(k, "unknown parameter %q (known: q)", k))
			return
		}
		if len(vs) > 1 || len(vs[0]) > maxParamLen {
			writeProblem(w, badParam(k, "parameter q: give it once, at most %d bytes", maxParamLen))
			return
		}
	}
	writeJSON(w, http.StatusOK, s.search(r.Context(), strings.TrimSpace(q.Get("q"))))
}

// resolve finds a model for the page: an uploaded config.json, the
// catalog, then (with a Hub) the Hub or its cache. It never reads a local
// path: the name comes from a request.
func (s *Server) resolve(ctx context.Context, name string) (*modelsource.Resolved, *Problem) {
	if name == "" {
		return nil, &Problem{Status: 400, Field: "model", Message: "no model given", Hint: "canifinetune models"}
	}
	if strings.HasPrefix(name, uploadPrefix) {
		return s.uploads.resolve(name)
	}
	rm, err := modelsource.Catalog(name)
	if err == nil {
		return rm, nil
	}
	if s.opts.Hub == nil || !errors.Is(err, catalog.ErrNotFound) || !strings.Contains(name, "/") {
		return nil, modelProblem(err)
	}
	if rm, ok := s.resolved.get(name); ok {
		return rm, nil
	}
	select {
	case s.hubSem <- struct{}{}:
	case <-ctx.Done():
		return nil, &Problem{Status: http.StatusServiceUnavailable, Field: "model", Message: "request cancelled while waiting for another Hub read"}
	}
	defer func() { <-s.hubSem }()
	ctx, cancel := context.WithTimeout(ctx, hubTimeout)
	defer cancel()
	rm, err = modelsource.ResolveID(ctx, name, modelsource.Options{Offline: s.opts.Offline,
		Open: func() (modelsource.Source, error) { return s.opts.Hub, nil }})
	if err != nil {
		return nil, modelProblem(err)
	}
	s.resolved.put(name, rm)
	return rm, nil
}

// modelProblem is a model that could not be resolved, in the CLI's words
// and hint, with the status that says why: 400 a name that cannot be one,
// 404 a model not found (or not cached, offline), 403 gated or private,
// 429 rate limited, 502 the Hub failing.
func modelProblem(err error) *Problem {
	pr := &Problem{Status: http.StatusBadGateway, Field: "model", Message: err.Error()}
	var me *modelsource.Error
	if errors.As(err, &me) {
		pr.Hint = me.Hint
		if me.Usage {
			pr.Status = http.StatusBadRequest
		}
	}
	switch {
	case errors.Is(err, catalog.ErrNotFound), errors.Is(err, hub.ErrNotFound), errors.Is(err, hub.ErrOffline):
		pr.Status = http.StatusNotFound
	case errors.Is(err, hub.ErrGated), errors.Is(err, hub.ErrUnauthorized):
		pr.Status = http.StatusForbidden
	case errors.Is(err, hub.ErrRateLimited):
		pr.Status = http.StatusTooManyRequests
	case errors.Is(err, hub.ErrInvalidID):
		pr.Status = http.StatusBadRequest
	case me == nil && !errors.Is(err, hub.ErrUnavailable) && !errors.Is(err, hub.ErrMalformed):
		pr.Status = http.StatusInternalServerError
	}
	return pr
}

// estimate answers p for any model the server resolves, with the
// resolution's warnings (a Hub index that disagrees with its shards) among
// the estimate's.
func (s *Server) estimate(ctx context.Context, p Params) (*report.Estimate, *Problem) {
	rm, pr := s.resolve(ctx, p["model"])
	if pr != nil {
		return nil, pr
	}
	out, pr := estimateModel(rm, p)
	if pr != nil {
		return nil, pr
	}
	out.Warnings = append(out.Warnings, rm.Warnings...)
	return out, nil
}

// memo keeps at most n answers for ttl: the Hub is asked once per model
// (and per search) while a user moves the page's sliders, not per change.
type memo[T any] struct {
	mu  sync.Mutex
	n   int
	ttl time.Duration
	m   map[string]memoEntry[T]
}

type memoEntry[T any] struct {
	v  T
	at time.Time
}

func newMemo[T any](n int, ttl time.Duration) *memo[T] {
	return &memo[T]{n: n, ttl: ttl, m: map[string]memoEntry[T]{}}
}

func (c *memo[T]) get(k string) (T, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok || time.Since(e.at) > c.ttl {
		var zero T
		return zero, false
	}
	return e.v, true
}

func (c *memo[T]) put(k string, v T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.n {
		// Drop the oldest: a handful of entries, scanned rarely.
		oldest := ""
		for key, e := range c.m {
			if oldest == "" || e.at.Before(c.m[oldest].at) {
				oldest = key
			}
		}
		delete(c.m, oldest)
	}
	c.m[k] = memoEntry[T]{v, time.Now()}
}
