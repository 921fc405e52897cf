package web_test

import (
	"bytes"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/canifinetune/canifinetune/catalog"
	"github.com/canifinetune/canifinetune/hfconfig"
	"github.com/canifinetune/canifinetune/internal/hub"
	"github.com/canifinetune/canifinetune/web"
)

const (
	hubToken  = "hf_fakeTokenThatMustNeverReachThePage"
	hubCommit = "0123456789abcdef0123456789abcdef01234567"
)

// fakeHub serves what hub.Client asks for: a search, and config.json of
// some/tiny-qwen (a catalog config under an id the catalog lacks) with no
// safetensors; some/gated answers GatedRepo unless the token is sent, and
// then 403 anyway (this token has no access); anything else is RepoNotFound.
type fakeHub struct {
	srv      *httptest.Server
	requests atomic.Int64
	down     atomic.Bool
}

func newFakeHub(t *testing.T) *fakeHub {
	t.Helper()
	e, err := catalog.Lookup("Qwen/Qwen2.5-0.5B")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeHub{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.requests.Add(1)
		if f.down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path == "/api/models" {
			if r.Header.Get("Authorization") != "" {
				t.Errorf("search sent a token")
			}
			json.NewEncoder(w).Encode([]map[string]string{{"id": "Qwen/Qwen2.5-0.5B"}, {"id": "some/tiny-qwen"}})
			return
		}
		switch {
		case strings.HasPrefix(r.URL.Path, "/some/tiny-qwen/resolve/"):
			w.Header().Set("X-Repo-Commit", hubCommit)
			if strings.HasSuffix(r.URL.Path, "/config.json") {
				w.Write(e.Config)
				return
			}
			w.Header().Set("X-Error-Code", "EntryNotFound")
			http.Error(w, "Entry not found", http.StatusNotFound)
		case strings.HasPrefix(r.URL.Path, "/some/gated/"):
			// A Hub that echoes the token back: the client redacts it.
			w.Header().Set("X-Error-Code", "GatedRepo")
			http.Error(w, "Access to model some/gated is restricted; you sent "+r.Header.Get("Authorization"), http.StatusForbidden)
		default:
			w.Header().Set("X-Error-Code", "RepoNotFound")
			http.Error(w, "Repository not found", http.StatusNotFound)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeHub) client(cache string, offline bool) *hub.Client {
	return &hub.Client{Endpoint: f.srv.URL, Token: hubToken, CacheDir: cache, Offline: offline, Tries: 1}
}

// TestHubModels: a Hub id the catalog lacks is estimated from the Hub,
// cached, and asked for once while the page changes; Hub failures get the
// CLI's words and their own status; offline the cache answers; without a
// Hub the catalog alone. No response carries the token.
func TestHubModels(t *testing.T) {
	fh := newFakeHub(t)
	cache := t.TempDir()
	online := newServer(t, web.Options{Hub: fh.client(cache, false)})
	offline := newServer(t, web.Options{Hub: fh.client(cache, true), Offline: true})
	offlineEmpty := newServer(t, web.Options{Hub: fh.client(t.TempDir(), true), Offline: true})
	none := newServer(t, web.Options{})
	var bodies [][]byte
	check := func(ts *httptest.Server, path string, status int, want ...string) []byte {
		t.Helper()
		code, b := get(t, ts, "GET", path, "", nil)
		bodies = append(bodies, b)
		if code != status {
			t.Errorf("%s: status %d, want %d: %s", path, code, status, b)
		}
		for _, w := range want {
			if !bytes.Contains(b, []byte(w)) {
				t.Errorf("%s: no %q in %s", path, w, b)
			}
		}
		return b
	}
	const q = "/api/estimate?model=some/tiny-qwen&gpu=rtx-4090"
	b := check(online, q, 200, `"from": "hub"`, `"verdict"`)
	var doc struct {
		Model struct {
			ID   string `json:"id"`
			From string `json:"from"`
		} `json:"model"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || doc.Model.ID != "some/tiny-qwen" {
		t.Errorf("model %+v (%v), want some/tiny-qwen", doc.Model, err)
	}
	n := fh.requests.Load()
	check(online, q+"&batch=4", 200)
	check(online, "/?model=some/tiny-qwen&gpu=rtx-4090", 200, `id="verdict"`, `data-mode="online"`)
	if m := fh.requests.Load(); m != n {
		t.Errorf("the page asked the Hub %d more times for a model it had read", m-n)
	}
	check(online, "/api/estimate?model=some/gated", 403, "gated", "request access")
	check(online, "/api/estimate?model=some/missing", 404, "some/missing", "not in the embedded catalog either")
	check(online, "/api/estimate?model=some/bad..id", 400, "bad..id")
	// Offline: the model read above is in the cache; nothing else is.
	n = fh.requests.Load()
	check(offline, q, 200, `"from": "hub cache"`)
	check(offlineEmpty, q, 404, "not available offline", "run once online")
	check(offlineEmpty, "/", 200, `data-mode="offline"`, "Hugging Face cache")
	if m := fh.requests.Load(); m != n {
		t.Errorf("offline servers made %d requests to the Hub", m-n)
	}
	check(none, q, 404, "not in the embedded catalog")
	check(none, "/", 200, `data-mode="off"`, "embedded catalog only")
	// A Hub that fails: the read is a 502 with the client's hint.
	fh.down.Store(true)
	check(online, "/api/estimate?model=some/other", 502, "hub unavailable", "the Hub is failing")
	fh.down.Store(false)
	for _, b := range bodies {
		if bytes.Contains(b, []byte(hubToken)) || bytes.Contains(b, []byte(hubToken[6:20])) {
			t.Errorf("a response carries the token: %s", b)
		}
	}
}

// TestSearch: catalog ids first, then the Hub's (catalog ids left out);
// offline, or with the Hub down, the cache's, and the page is told why.
func TestSearch(t *testing.T) {
	fh := newFakeHub(t)
	cache := t.TempDir()
	c := fh.client(cache, false)
	online := newServer(t, web.Options{Hub: c})
	if code, b := get(t, online, "GET", "/api/estimate?model=some/tiny-qwen", "", nil); code != 200 {
		t.Fatalf("estimate: %d %s", code, b) // caches some/tiny-qwen
	}
	search := func(ts *httptest.Server, q string) web.SearchResult {
		t.Helper()
		code, b := get(t, ts, "GET", "/api/search?q="+url.QueryEscape(q), "", nil)
		if code != 200 {
			t.Fatalf("search %q: %d %s", q, code, b)
		}
		var r web.SearchResult
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := search(online, "qwen2.5-0.5")
	if d := cmp.Diff([]string{"some/tiny-qwen"}, r.Hub); d != "" || r.HubFrom != "hub" || r.HubError != "" {
		t.Errorf("online: hub %v from %q (%s), diff:\n%s", r.Hub, r.HubFrom, r.HubError, d)
	}
	if len(r.Catalog) == 0 || !strings.Contains(strings.ToLower(r.Catalog[0]), "qwen2.5-0.5") {
		t.Errorf("online: catalog %v", r.Catalog)
	}
	fh.down.Store(true)
	r = search(online, "tiny")
	fh.down.Store(false)
	if d := cmp.Diff([]string{"some/tiny-qwen"}, r.Hub); d != "" || r.HubFrom != "cache" || !strings.Contains(r.HubError, "503") {
		t.Errorf("Hub down: hub %v from %q (%q), diff:\n%s", r.Hub, r.HubFrom, r.HubError, d)
	}
	offline := newServer(t, web.Options{Hub: fh.client(cache, true), Offline: true})
	n := fh.requests.Load()
	r = search(offline, "TINY")
	if d := cmp.Diff([]string{"some/tiny-qwen"}, r.Hub); d != "" || r.HubFrom != "cache" || r.State.Mode != "offline" {
		t.Errorf("offline: %+v, diff:\n%s", r, d)
	}
	if fh.requests.Load() != n {
		t.Errorf("an offline search asked the Hub")
	}
	r = search(newServer(t, web.Options{}), "qwen")
	if len(r.Hub) != 0 || r.State.Mode != "off" || len(r.Catalog) == 0 {
		t.Errorf("no Hub: %+v", r)
	}
	if code, b := get(t, online, "GET", "/api/search?x=1", "", nil); code != 400 || !bytes.Contains(b, []byte(`unknown parameter \"x\"`)) {
		t.Errorf("unknown parameter: %d %s", code, b)
	}
}

func configUpload(t *testing.T, name string, data []byte, fields ...[2]string) (string, *bytes.Buffer) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for _, f := range fields {
		mw.WriteField(f[0], f[1])
	}
	if data != nil {
		w, err := mw.CreateFormFile("config", name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
	}
	mw.Close()
	return mw.FormDataContentType(), &b
}

// TestConfigUpload: an uploaded config.json is estimated as the command
// line estimates the file; what hfconfig refuses is refused in the CLI's
// words (the file name, then the parser's error), and so are size and
// form mistakes.
func TestConfigUpload(t *testing.T) {
	ts := newServer(t, web.Options{})
	e, err := catalog.Lookup("Qwen/Qwen2.5-7B")
	if err != nil {
		t.Fatal(err)
	}
	ct, body := configUpload(t, "config.json", e.Config)
	code, b := get(t, ts, "POST", "/api/config", ct, body)
	var up web.ConfigUpload
	if err := json.Unmarshal(b, &up); code != 200 || err != nil || !strings.HasPrefix(up.Model, "config:") || up.ModelType != "qwen2" {
		t.Fatalf("upload: %d %s", code, b)
	}
	code, b = get(t, ts, "GET", "/api/estimate?gpu=rtx-4090&model="+up.Model, "", nil)
	if code != 200 {
		t.Fatalf("estimate of the upload: %d %s", code, b)
	}
	// The same figures as the catalog entry it came from.
	_, want := get(t, ts, "GET", "/api/estimate?gpu=rtx-4090&model=Qwen/Qwen2.5-7B", "", nil)
	total := func(b []byte) float64 {
		var d struct {
			Total float64 `json:"total_gb"`
		}
		json.Unmarshal(b, &d)
		return d.Total
	}
	if total(b) == 0 || total(b) != total(want) {
		t.Errorf("upload total %v GiB, the catalog's %v", total(b), total(want))
	}

	bad := []byte(`{"model_type": "llama", "hidden_size": -4}`)
	_, perr := hfconfig.Parse(bad)
	if perr == nil {
		t.Fatal("hfconfig accepts the bad config")
	}
	huge := append([]byte(`{"x":"`), bytes.Repeat([]byte("a"), web.MaxConfigBytes)...)
	for _, tc := range []struct {
		name       string
		data       []byte
		fields     [][2]string
		status     int
		want       string
		wantExactl bool
	}{
		{"my-config.json", bad, nil, 400, "my-config.json: " + perr.Error(), true},
		{"config.json", []byte("not json"), nil, 400, "config.json: ", false},
		{"config.json", huge, nil, 413, "over 1 MiB", false},
		{"", nil, [][2]string{{"gpu", "rtx-4090"}}, 400, `no file in field \"config\"`, false},
		{"config.json", e.Config, [][2]string{{"model", "x"}}, 400, `unknown upload field \"model\"`, false},
	} {
		ct, body := configUpload(t, tc.name, tc.data, tc.fields...)
		code, b := get(t, ts, "POST", "/api/config", ct, body)
		var p problem
		json.Unmarshal(b, &p)
		if code != tc.status || !strings.Contains(string(b), tc.want) || (tc.wantExactl && p.Error != tc.want) {
			t.Errorf("%s: %d %s; want %d %q", tc.name, code, b, tc.status, tc.want)
		}
	}
	if code, b := get(t, ts, "GET", "/api/estimate?model=config:0000000000000000", "", nil); code != 404 || !bytes.Contains(b, []byte("upload the config.json again")) {
		t.Errorf("unknown upload: %d %s", code, b)
	}

	// The page: a 303 to the view of the upload, the other parameters kept.
	ct, body = configUpload(t, "config.json", e.Config, [2]string{"gpu", "rtx-4090"}, [2]string{"method", "qlora"})
	req, _ := http.NewRequest("POST", ts.URL+"/config", body)
	req.Header.Set("Content-Type", ct)
	cl := *ts.Client()
	cl.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != 303 || loc != "/?gpu=rtx-4090&method=qlora&model="+url.QueryEscape(up.Model) {
		t.Errorf("page upload: %d Location %q", resp.StatusCode, loc)
	}
	ct, body = configUpload(t, "bad.json", bad)
	if code, b := get(t, ts, "POST", "/config", ct, body); code != 400 || !bytes.Contains(b, []byte("bad.json: ")) || !bytes.Contains(b, []byte(`id="calc"`)) {
		t.Errorf("page upload of a bad config: %d, want the page with the error", code)
	}
}
