package hub

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSearch(t *testing.T) {
	var gotAuth, gotQuery string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth, gotQuery = r.Header.Get("Authorization"), r.URL.RawQuery
		switch r.URL.Query().Get("search") {
		case "broken":
			w.Write([]byte(`{"not":"a list"}`))
		case "down":
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			// A duplicate, an id that escapes the repo, a legacy bare
			// name and an older Hub's modelId.
			w.Write([]byte(`[{"id":"Qwen/Qwen2.5-7B"},{"id":"Qwen/Qwen2.5-7B"},{"id":"../../etc"},{"id":"gpt2"},{"modelId":"Qwen/Qwen2.5-0.5B"},{"id":"org/more"}]`))
		}
	}))
	defer srv.Close()
	c := &Client{Endpoint: srv.URL, Token: "hf_secretsecretsecret", Tries: 1}
	ids, err := c.Search(context.Background(), " qwen ", 2)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-0.5B"}, ids); d != "" {
		t.Errorf("ids (-want +got):\n%s", d)
	}
	if gotAuth != "" {
		t.Errorf("search sent Authorization %q: it must be anonymous", gotAuth)
	}
	if want := "direction=-1&limit=2&search=qwen&sort=downloads"; gotQuery != want {
		t.Errorf("query %q, want %q", gotQuery, want)
	}
	for _, tc := range []struct {
		q    string
		kind error
	}{{"broken", ErrMalformed}, {"down", ErrUnavailable}} {
		if _, err := c.Search(context.Background(), tc.q, 5); !errors.Is(err, tc.kind) {
			t.Errorf("Search(%q) = %v, want %v", tc.q, err, tc.kind)
		}
	}
	off := &Client{Endpoint: srv.URL, Offline: true}
	if _, err := off.Search(context.Background(), "qwen", 5); !errors.Is(err, ErrOffline) {
		t.Errorf("offline Search = %v, want ErrOffline", err)
	}
	unreachable := &Client{Endpoint: "http://127.0.0.1:1", Tries: 1}
	if _, err := unreachable.Search(context.Background(), "qwen", 5); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Search with no Hub = %v, want ErrUnavailable", err)
	}
}

func TestCachedModels(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"models--Qwen--Qwen2.5-7B", "models--meta-llama--Llama-3.1-8B", "datasets--org--data", "models--bare", "models--a--b--c"} {
		if err := os.MkdirAll(filepath.Join(dir, d, "snapshots"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "models--org--file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c := &Client{CacheDir: dir}
	for _, tc := range []struct {
		q    string
		want []string
	}{
		{"", []string{"Qwen/Qwen2.5-7B", "meta-llama/Llama-3.1-8B"}},
		{"LLAMA", []string{"meta-llama/Llama-3.1-8B"}},
		{"mistral", nil},
	} {
		got, err := c.CachedModels(tc.q, 10)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("CachedModels(%q) (-want +got):\n%s", tc.q, d)
		}
	}
	if got, err := (&Client{CacheDir: filepath.Join(dir, "absent")}).CachedModels("", 10); err != nil || got != nil {
		t.Errorf("absent cache: %v, %v; want nothing, no error", got, err)
	}
}

// FuzzParseSearch: whatever the Hub answers to a search, the ids that come
// back could each name a repo, are distinct and at most limit.
func FuzzParseSearch(f *testing.F) {
	f.Add([]byte(`[{"id":"Qwen/Qwen2.5-7B"},{"modelId":"a/b"},{"id":"../x"}]`), 2)
	f.Add([]byte(`[]`), 1)
	f.Add([]byte(`{"id":"a/b"}`), 5)
	f.Add([]byte(`[{"id":"a/b"},{"id":"a/b"},{"id":"a--b/c"},{"id":"gpt2"}]`), 100)
	f.Fuzz(func(t *testing.T, body []byte, limit int) {
		limit = min(max(limit, 1), MaxSearchResults)
		ids, err := parseSearch(body, limit)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if len(ids) > limit {
			t.Fatalf("%d ids, limit %d", len(ids), limit)
		}
		seen := map[string]bool{}
		for _, id := range ids {
			if !searchableID(id) || seen[id] {
				t.Fatalf("id %q: not a repo id, or repeated", id)
			}
			seen[id] = true
		}
	})
}
