package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
)

// maxSearchBody bounds the Hub's answer to a search: 100 results with their
// tags are tens of KB.
const maxSearchBody = 4 << 20

// MaxSearchResults bounds the limit of Search and CachedModels.
const MaxSearchResults = 100

// Search lists the ids of the Hub's models whose id contains query (the
// Hub's /api/models?search=), the most downloaded first, at most limit.
//
// The search is anonymous, whatever Token holds: its results may be shown
// to whoever reaches the caller (a page served to other machines), and
// private repos must not be listed there. Offline it is an ErrOffline
// error: CachedModels is the offline answer. It makes one attempt, bounded
// by RequestTimeout: a search is typed interactively, and a slow Hub is
// better reported than waited for.
func (c *Client) Search(ctx context.Context, query string, limit int) ([]string, error) {
	query = strings.TrimSpace(query)
	limit = min(max(limit, 1), MaxSearchResults)
	if c.Offline {
		return nil, &Error{Kind: ErrOffline, Repo: "search " + strconv.Quote(query), Hint: "the Hugging Face cache's models only (HF_HUB_OFFLINE)"}
	}
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout())
	defer cancel()
	q := url.Values{"search": {query}, "limit": {strconv.Itoa(limit)}, "sort": {"downloads"}, "direction": {"-1"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.endpoint()+"/api/models?"+q.Encode(), nil)
	if err != nil {
		return nil, &Error{Kind: ErrMalformed, Repo: "search", Err: err, Hint: "check HF_ENDPOINT"}
	}
	req.Header.Set("User-Agent", "canifinetune")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, &Error{Kind: ErrUnavailable, Repo: "search", Err: c.outsideErr(ctx, stripURL(err)), Hint: "check the network; the catalog and the Hugging Face cache still answer"}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return nil, c.classify(resp, body, "search", "", "")
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxSearchBody+1))
	if err != nil {
		return nil, &Error{Kind: ErrUnavailable, Repo: "search", Status: resp.StatusCode, Err: c.outsideErr(ctx, err.Error())}
	}
	if len(body) > maxSearchBody {
		return nil, &Error{Kind: ErrMalformed, Repo: "search", Status: resp.StatusCode, Err: fmt.Errorf("answer over %d bytes", maxSearchBody)}
	}
	return parseSearch(body, limit)
}

// parseSearch reads the ids of a /api/models answer: a JSON array of
// objects with "id" (older Hubs: "modelId"). Ids that could not name a
// repo are dropped: they would become links and cache paths.
func parseSearch(body []byte, limit int) ([]string, error) {
	var rows []struct {
		ID      string `json:"id"`
		ModelID string `json:"modelId"`
	}
	if err := json.Unmarshal(body, &rows); err != nil {
		return nil, &Error{Kind: ErrMalformed, Repo: "search", Err: fmt.Errorf("answer is not a JSON array of models: %w", err)}
	}
	var ids []string
	for _, r := range rows {
		id := r.ID
		if id == "" {
			id = r.ModelID
		}
		if !searchableID(id) || slices.Contains(ids, id) {
			continue
		}
		ids = append(ids, id)
		if len(ids) == limit {
			break
		}
	}
	return ids, nil
}

// CachedModels lists the ids of the models the Hugging Face cache holds
// (models--org--name directories) whose id contains query, case-insensitive,
// sorted, at most limit: what can be estimated offline beyond the catalog.
func (c *Client) CachedModels(query string, limit int) ([]string, error) {
	if !(cache{root: c.CacheDir}).enabled() {
		return nil, nil
	}
	limit = min(max(limit, 1), MaxSearchResults)
	ents, err := os.ReadDir(c.CacheDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the Hugging Face cache: %w", err)
	}
	q := strings.ToLower(strings.TrimSpace(query))
	var ids []string
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "models--")
		if !ok || !e.IsDir() {
			continue
		}
		org, name, ok := strings.Cut(rest, "--")
		id := org + "/" + name
		if !ok || !searchableID(id) || !strings.Contains(strings.ToLower(id), q) {
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if len(ids) > limit {
		ids = ids[:limit]
	}
	return ids, nil
}

// searchableID: an org/name id the Hub could hold (a bare legacy name is
// not resolved beyond the catalog, so it is not offered either).
func searchableID(id string) bool {
	return strings.Contains(id, "/") && validateID(id, "main") == nil
}
