package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/canifinetune/canifinetune/internal/safetensors"
)

const commitA = "0123456789abcdef0123456789abcdef01234567"

var testConfig = []byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":512}`)

// shardData is the zero data after each header: larger than the
// speculative range, so reading it would show in the bytes the CDN sent.
const shardData = 512 * 1024

// twoShardRepo is a sharded checkpoint: 2 × (512×512 BF16) + a 512 F32 norm.
func twoShardRepo() *fakeRepo {
	s1 := makeShard(tensorSpec{"model.embed_tokens.weight", "BF16", []uint64{512, 512}, 2})
	s2 := makeShard(tensorSpec{"lm_head.weight", "BF16", []uint64{512, 512}, 2}, tensorSpec{"model.norm.weight", "F32", []uint64{512}, 4})
	return &fakeRepo{commit: commitA, files: map[string][]byte{
		"config.json": testConfig,
		"model.safetensors.index.json": makeIndex(2*shardData+2048, map[string]string{
			"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
			"lm_head.weight":            "model-00002-of-00002.safetensors",
			"model.norm.weight":         "model-00002-of-00002.safetensors",
		}),
		"model-00001-of-00002.safetensors": s1,
		"model-00002-of-00002.safetensors": s2,
	}}
}

var twoShardCounts = &safetensors.Counts{
	Tensors:     3,
	Parameters:  2*512*512 + 512,
	StoredBytes: 2*shardData + 2048,
	ByDType: map[safetensors.DType]safetensors.DTypeCount{
		safetensors.BF16: {Tensors: 2, Elements: 2 * 512 * 512, Bytes: 2 * shardData},
		safetensors.F32:  {Tensors: 1, Elements: 512, Bytes: 2048},
	},
}

// summary is the part of a Model the tests compare.
type summary struct {
	ID, Revision, Commit string
	Config               string
	Tensors              *safetensors.Counts
	TotalSize            int64
	Shards               []string
	FromCache            bool
	Warnings             []string
}

func summarize(m *Model) summary {
	return summary{m.ID, m.Revision, m.Commit, string(m.ConfigJSON), m.Tensors, m.TotalSizeFromIndex, m.Shards, m.FromCache, m.Warnings}
}

func TestModelMultiShard(t *testing.T) {
	f := newFakeHub(t)
	f.repos["org/two"] = twoShardRepo()
	c, _ := f.client(t.TempDir())
	var progress bytes.Buffer
	c.Progress = &progress
	m, err := c.Model(context.Background(), "org/two", "")
	if err != nil {
		t.Fatal(err)
	}
	want := summary{
		ID: "org/two", Revision: "main", Commit: commitA, Config: string(testConfig),
		Tensors: twoShardCounts, TotalSize: 2*shardData + 2048,
		Shards: []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"},
	}
	if diff := cmp.Diff(want, summarize(m)); diff != "" {
		t.Errorf("Model (-want +got):\n%s", diff)
	}
	if len(m.Headers) != 2 || len(m.Headers[1].Tensors) != 2 {
		t.Errorf("Headers = %+v, want 2 headers, the second with 2 tensors", m.Headers)
	}
	if lines := strings.Count(progress.String(), "\n"); lines != 2 || !strings.Contains(progress.String(), "2/2") {
		t.Errorf("progress = %q, want one line per shard ending at 2/2", progress.String())
	}
	cdnHost := mustHost(t, f.cdn.URL)
	var cdnRequests int
	for _, r := range f.seen() {
		if r.host != cdnHost {
			continue
		}
		cdnRequests++
		if r.rng != fmt.Sprintf("bytes=0-%d", speculativeRange-1) {
			t.Errorf("CDN request %s has Range %q, want the speculative range", r.path, r.rng)
		}
		if r.bytesSent > speculativeRange {
			t.Errorf("CDN sent %d bytes for %s: more than a header", r.bytesSent, r.path)
		}
	}
	if cdnRequests != 2 {
		t.Errorf("%d CDN requests, want 1 per shard", cdnRequests)
	}
}

func mustHost(t *testing.T, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// TestTokenStaysWithTheHub: the token reaches the Hub's host, never the CDN
// a redirect leads to, and never errors, progress or cache files.
func TestTokenStaysWithTheHub(t *testing.T) {
	f := newFakeHub(t)
	repo := twoShardRepo()
	repo.gated = true
	f.repos["org/gated"] = repo
	f.repos["old/name"] = &fakeRepo{movedTo: "org/gated"}
	dir := t.TempDir()
	c, _ := f.client(dir)
	c.Token = goodToken
	var progress bytes.Buffer
	c.Progress = &progress
	if _, err := c.Model(context.Background(), "old/name", "main"); err != nil {
		t.Fatal(err)
	}
	hubHost, cdnHost := mustHost(t, f.hub.URL), mustHost(t, f.cdn.URL)
	var hubAuthed, cdn int
	for _, r := range f.seen() {
		switch r.host {
		case hubHost:
			if r.auth != "Bearer "+goodToken {
				t.Errorf("Hub request %s without the token (Authorization %q)", r.path, r.auth)
			}
			hubAuthed++
		case cdnHost:
			cdn++
			if r.auth != "" {
				t.Errorf("CDN request %s got Authorization %q", r.path, r.auth)
			}
		}
	}
	if hubAuthed == 0 || cdn == 0 {
		t.Fatalf("%d Hub and %d CDN requests: the test did not exercise the redirect", hubAuthed, cdn)
	}

	// The token must appear nowhere the user or a log could see it.
	c.Token = "hf_wrongtokenvalue"
	_, err := c.Model(context.Background(), "org/gated", "main")
	if !errors.Is(err, ErrGated) {
		t.Fatalf("wrong token: err = %v, want ErrGated", err)
	}
	out := fmt.Sprintf("%v %+v %#v %s %q %x %v", err, c, c, c.Token, c.Token, c.Token, progress.String())
	// Marshal the client without its *http.Client, whose CheckRedirect func
	// json cannot encode (the error would leave nothing to check).
	plain := *c
	plain.HTTP = nil
	//lint:ignore SA1026 plain.HTTP is nil: nothing here needs encoding as a func
	js, jerr := json.Marshal(plain)
	if jerr != nil {
		t.Fatal(jerr)
	}
	if !strings.Contains(string(js), `"Token":"[redacted]"`) {
		t.Errorf("client JSON %s does not carry the redacted token", js)
	}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("client", "token", c.Token, "client", c)
	for _, tok := range []string{goodToken, "hf_wrongtokenvalue"} {
		for what, s := range map[string]string{"formatted": out, "json": string(js), "log": logged.String()} {
			if strings.Contains(s, tok) {
				t.Errorf("token in %s output: %s", what, s)
			}
		}
	}
	if !strings.Contains(err.Error(), redacted) {
		t.Errorf("the echoed Authorization header was not redacted: %v", err)
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, []byte(goodToken)) {
			t.Errorf("token saved in %s", p)
		}
		return nil
	})
}

func TestModelErrors(t *testing.T) {
	tests := []struct {
		name     string
		id, rev  string
		token    Token
		setup    func(f *fakeHub)
		target   error
		hint     []string
		requests int // to the Hub, -1: do not check
		slept    []time.Duration
	}{
		{name: "gated, no token", id: "org/gated", target: ErrGated,
			hint: []string{"request access on the model page", "/org/gated", "then set HF_TOKEN"}, requests: 1},
		{name: "gated, token without access", id: "org/gated", token: "hf_nope", target: ErrGated,
			hint: []string{"request access"}, requests: 1},
		{name: "private, no token", id: "org/private", target: ErrUnauthorized, hint: []string{"set HF_TOKEN"}, requests: 1},
		{name: "private, bad token", id: "org/private", token: "hf_nope", target: ErrUnauthorized, hint: []string{"token was refused"}, requests: 1},
		{name: "missing repo, no token (401)", id: "org/missing", target: ErrNotFound, hint: []string{"check the id", "HF_TOKEN"}, requests: 1},
		{name: "missing repo, token (404)", id: "org/missing", token: goodToken, target: ErrNotFound, hint: []string{"check the id"}, requests: 1},
		{name: "missing revision", id: "org/two", rev: "v9", target: ErrNotFound, hint: []string{`"v9"`}, requests: 1},
		{name: "rate limited every try", id: "org/two", target: ErrRateLimited,
			setup:    func(f *fakeHub) { f.failures["config.json"] = []int{429, 429, 429, 429} },
			hint:     []string{"HF_TOKEN"},
			requests: 3, slept: []time.Duration{time.Second, 2 * time.Second}},
		{name: "rate limited, Retry-After too long", id: "org/two", target: ErrRateLimited,
			setup:    func(f *fakeHub) { f.failures["config.json"] = []int{429}; f.retryAfter = "3600" },
			hint:     []string{"wait 1h0m0s"},
			requests: 1},
		{name: "5xx every try", id: "org/two", target: ErrUnavailable,
			setup:    func(f *fakeHub) { f.failures["config.json"] = []int{500, 502, 503, 504} },
			requests: 3, slept: []time.Duration{time.Second, 2 * time.Second}},
		{name: "shard header 5xx every try", id: "org/two", target: ErrUnavailable,
			setup:    func(f *fakeHub) { f.failures["model-00002-of-00002.safetensors"] = []int{500, 500, 500} },
			requests: -1, slept: []time.Duration{time.Second, 2 * time.Second}},
		{name: "invalid id", id: "../etc/passwd", target: ErrInvalidID, requests: 0},
		{name: "three parts", id: "a/b/c", target: ErrInvalidID, requests: 0},
		{name: "double dash", id: "a--b/c", target: ErrInvalidID, requests: 0},
		{name: "revision escapes", id: "org/two", rev: "../../x", target: ErrInvalidID, requests: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeHub(t)
			f.repos["org/two"] = twoShardRepo()
			gated := twoShardRepo()
			gated.gated = true
			f.repos["org/gated"] = gated
			private := twoShardRepo()
			private.private = true
			f.repos["org/private"] = private
			if tt.setup != nil {
				tt.setup(f)
			}
			c, slept := f.client(t.TempDir())
			c.Token = tt.token
			_, err := c.Model(context.Background(), tt.id, tt.rev)
			if !errors.Is(err, tt.target) {
				t.Fatalf("err = %v, want %v", err, tt.target)
			}
			var he *Error
			if !errors.As(err, &he) {
				t.Fatalf("err %T is not a *hub.Error", err)
			}
			for _, h := range tt.hint {
				if !strings.Contains(he.Hint, h) {
					t.Errorf("hint %q does not say %q", he.Hint, h)
				}
			}
			hubHost := mustHost(t, f.hub.URL)
			var n int
			for _, r := range f.seen() {
				if r.host == hubHost {
					n++
				}
			}
			if tt.requests >= 0 && n != tt.requests {
				t.Errorf("%d requests to the Hub, want %d", n, tt.requests)
			}
			if diff := cmp.Diff(tt.slept, *slept); diff != "" {
				t.Errorf("waits between retries (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRetriesThenSucceeds(t *testing.T) {
	f := newFakeHub(t)
	f.repos["org/two"] = twoShardRepo()
	f.failures["config.json"] = []int{503}
	f.failures["model.safetensors.index.json"] = []int{429}
	f.retryAfter = "7"
	c, slept := f.client(t.TempDir())
	m, err := c.Model(context.Background(), "org/two", "main")
	if err != nil {
		t.Fatal(err)
	}
	if m.Tensors == nil || m.Tensors.Parameters != twoShardCounts.Parameters {
		t.Errorf("Tensors = %+v after retries", m.Tensors)
	}
	// The 503 waits the backoff; the 429 waits what Retry-After asked.
	if diff := cmp.Diff([]time.Duration{time.Second, 7 * time.Second}, *slept); diff != "" {
		t.Errorf("waits (-want +got):\n%s", diff)
	}
}

// TestTimeoutsBounded: a Hub that never answers costs the per-request
// timeout times the tries, not forever.
func TestTimeoutsBounded(t *testing.T) {
	block := make(chan struct{})
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(block) // runs first: unblocks handlers so Close returns
	c := &Client{Endpoint: srv.URL, RequestTimeout: 50 * time.Millisecond, Deadline: 5 * time.Second, Backoff: time.Millisecond}
	start := time.Now()
	_, err := c.Model(context.Background(), "org/two", "main")
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if n := calls.Load(); n != DefaultTries {
		t.Errorf("%d tries, want %d", n, DefaultTries)
	}
	if el := time.Since(start); el >= c.Deadline {
		t.Errorf("took %v: the per-request timeout did not fire", el)
	}
}

func TestLargeHeaderTakesTwoRanges(t *testing.T) {
	var specs []tensorSpec
	for i := range 3000 { // ~70 bytes each: a header over the speculative range
		specs = append(specs, tensorSpec{fmt.Sprintf("model.layers.%d.mlp.experts.%d.weight", i/100, i%100), "F16", []uint64{2}, 2})
	}
	shard := makeShard(specs...)
	f := newFakeHub(t)
	f.repos["org/big"] = &fakeRepo{commit: commitA, files: map[string][]byte{"config.json": testConfig, "model.safetensors": shard}}
	c, _ := f.client(t.TempDir())
	m, err := c.Model(context.Background(), "org/big", "main")
	if err != nil {
		t.Fatal(err)
	}
	if m.Tensors.Tensors != 3000 || m.Tensors.Parameters != 6000 {
		t.Errorf("Tensors = %d, Parameters = %d; want 3000, 6000", m.Tensors.Tensors, m.Tensors.Parameters)
	}
	n := binary8(shard)
	var ranges []string
	for _, r := range f.seen() {
		if r.host == mustHost(t, f.cdn.URL) {
			ranges = append(ranges, r.rng)
		}
	}
	want := []string{fmt.Sprintf("bytes=0-%d", speculativeRange-1), fmt.Sprintf("bytes=%d-%d", speculativeRange, 8+n-1)}
	if diff := cmp.Diff(want, ranges); diff != "" {
		t.Errorf("ranges (-want +got):\n%s", diff)
	}
}

func binary8(b []byte) int {
	n, _ := safetensors.HeaderLength(b)
	return int(n)
}

// TestServerIgnoringRange: a server that answers 200 with the whole file is
// read only up to the header; the connection is dropped after.
func TestServerIgnoringRange(t *testing.T) {
	f := newFakeHub(t)
	big := makeShard(tensorSpec{"w", "U8", []uint64{32 << 20}, 1}) // 32 MiB of weights
	f.repos["org/one"] = &fakeRepo{commit: commitA, files: map[string][]byte{"config.json": testConfig, "model.safetensors": big}}
	f.ignoreRange = true
	c, _ := f.client(t.TempDir())
	m, err := c.Model(context.Background(), "org/one", "main")
	if err != nil {
		t.Fatal(err)
	}
	if m.Tensors.Parameters != 32<<20 {
		t.Errorf("Parameters = %d, want %d", m.Tensors.Parameters, 32<<20)
	}
	cdnHost := mustHost(t, f.cdn.URL)
	for _, r := range f.seen() {
		if r.host == cdnHost && r.bytesSent > 16<<20 {
			t.Errorf("the CDN sent %d bytes: the client read the weights", r.bytesSent)
		}
	}
}

func TestCacheLayoutAndOffline(t *testing.T) {
	f := newFakeHub(t)
	f.repos["org/two"] = twoShardRepo()
	dir := t.TempDir()
	c, _ := f.client(dir)
	online, err := c.Model(context.Background(), "org/two", "main")
	if err != nil {
		t.Fatal(err)
	}

	repoDir := filepath.Join(dir, "models--org--two")
	ref, err := os.ReadFile(filepath.Join(repoDir, "refs", "main"))
	if err != nil || string(ref) != commitA {
		t.Errorf("refs/main = %q, %v; want the commit", ref, err)
	}
	snap := filepath.Join(repoDir, "snapshots", commitA)
	link, err := os.Readlink(filepath.Join(snap, "config.json"))
	if err != nil || !strings.HasPrefix(link, filepath.Join("..", "..", "blobs")+string(filepath.Separator)) {
		t.Errorf("config.json is %q, %v; want a symlink into ../../blobs", link, err)
	}
	if b, err := os.ReadFile(filepath.Join(snap, "config.json")); err != nil || !bytes.Equal(b, testConfig) {
		t.Errorf("cached config.json = %q, %v", b, err)
	}
	for _, shard := range online.Shards {
		p := filepath.Join(snap, ".canifinetune", "headers", shard+".json")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("header of %s not cached: %v", shard, err)
			continue
		}
		if len(b) > 4096 {
			t.Errorf("cached header of %s is %d bytes: more than a header", shard, len(b))
		}
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".tmp") {
			t.Errorf("temporary file left behind: %s", p)
		}
		return err
	})

	// Offline: same answer, no request.
	before := len(f.seen())
	off, _ := f.client(dir)
	off.Offline = true
	m, err := off.Model(context.Background(), "org/two", "main")
	if err != nil {
		t.Fatal(err)
	}
	want := summarize(online)
	want.FromCache = true
	if diff := cmp.Diff(want, summarize(m)); diff != "" {
		t.Errorf("offline Model (-want +got):\n%s", diff)
	}
	if after := len(f.seen()); after != before {
		t.Errorf("offline mode made %d requests", after-before)
	}

	// Online again with the commit: a complete snapshot needs no request.
	m, err = c.Model(context.Background(), "org/two", commitA)
	if err != nil || !m.FromCache || len(f.seen()) != before {
		t.Errorf("by commit: FromCache = %v, err = %v, %d new requests; want the cache alone", m != nil && m.FromCache, err, len(f.seen())-before)
	}

	// Offline, a model never fetched.
	_, err = off.Model(context.Background(), "org/other", "main")
	var he *Error
	if !errors.Is(err, ErrOffline) || !errors.As(err, &he) || !strings.Contains(he.Hint, "unset HF_HUB_OFFLINE") {
		t.Errorf("uncached model offline: err = %v, want ErrOffline with a hint", err)
	}
	// Offline, a shard header lost from the cache.
	os.Remove(filepath.Join(snap, ".canifinetune", "headers", "model-00002-of-00002.safetensors.json"))
	_, err = off.Model(context.Background(), "org/two", "main")
	if !errors.Is(err, ErrOffline) || !strings.Contains(err.Error(), "model-00002-of-00002.safetensors") {
		t.Errorf("missing header offline: err = %v, want ErrOffline naming the shard", err)
	}
}

// TestHubUnreachableFallsBackToCache, as huggingface_hub does.
func TestHubUnreachableFallsBackToCache(t *testing.T) {
	f := newFakeHub(t)
	f.repos["org/two"] = twoShardRepo()
	dir := t.TempDir()
	c, _ := f.client(dir)
	if _, err := c.Model(context.Background(), "org/two", "main"); err != nil {
		t.Fatal(err)
	}
	f.failures["config.json"] = []int{503, 503, 503}
	m, err := c.Model(context.Background(), "org/two", "main")
	if err != nil {
		t.Fatal(err)
	}
	if !m.FromCache || len(m.Warnings) != 1 || !strings.Contains(m.Warnings[0], "could not be reached") {
		t.Errorf("FromCache = %v, Warnings = %q; want the cache and a warning", m.FromCache, m.Warnings)
	}
}

// TestExistingHuggingFaceCache reads a cache laid out by huggingface_hub
// (whole shards downloaded by transformers), offline.
func TestExistingHuggingFaceCache(t *testing.T) {
	dir := t.TempDir()
	repo := twoShardRepo()
	repoDir := filepath.Join(dir, "models--org--two")
	snap := filepath.Join(repoDir, "snapshots", commitA)
	for name, body := range repo.files {
		blob := filepath.Join(repoDir, "blobs", sha(body))
		must(t, os.MkdirAll(filepath.Dir(blob), 0o755))
		must(t, os.WriteFile(blob, body, 0o644))
		must(t, os.MkdirAll(snap, 0o755))
		must(t, os.Symlink(filepath.Join("..", "..", "blobs", sha(body)), filepath.Join(snap, name)))
	}
	must(t, os.MkdirAll(filepath.Join(repoDir, "refs"), 0o755))
	must(t, os.WriteFile(filepath.Join(repoDir, "refs", "main"), []byte(commitA), 0o644))

	c := &Client{CacheDir: dir, Offline: true, Endpoint: "http://127.0.0.1:1"}
	m, err := c.Model(context.Background(), "org/two", "")
	if err != nil {
		t.Fatal(err)
	}
	want := summary{
		ID: "org/two", Revision: "main", Commit: commitA, Config: string(testConfig),
		Tensors: twoShardCounts, TotalSize: 2*shardData + 2048,
		Shards:    []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"},
		FromCache: true,
	}
	if diff := cmp.Diff(want, summarize(m)); diff != "" {
		t.Errorf("Model (-want +got):\n%s", diff)
	}

	// A cache with config.json only (AutoConfig was run): config, no counts.
	must(t, os.Remove(filepath.Join(snap, "model.safetensors.index.json")))
	m, err = c.Model(context.Background(), "org/two", "main")
	if err != nil {
		t.Fatal(err)
	}
	if m.Tensors != nil || len(m.Warnings) != 1 || !strings.Contains(m.Warnings[0], "run once online") {
		t.Errorf("config-only cache: Tensors = %v, Warnings = %q", m.Tensors, m.Warnings)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestSingleFileAndNoSafetensors(t *testing.T) {
	f := newFakeHub(t)
	f.repos["org/one"] = &fakeRepo{commit: commitA, files: map[string][]byte{
		"config.json":       testConfig,
		"model.safetensors": makeShard(tensorSpec{"w", "F8_E4M3", []uint64{64, 64}, 1}, tensorSpec{"w_scale", "F32", []uint64{}, 4}),
	}}
	f.repos["org/bin"] = &fakeRepo{commit: commitA, files: map[string][]byte{"config.json": testConfig, "pytorch_model.bin": []byte("pickle")}}
	dir := t.TempDir()
	c, _ := f.client(dir)

	m, err := c.Model(context.Background(), "org/one", "main")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"model.safetensors"}, m.Shards); diff != "" || m.Tensors.Parameters != 64*64+1 {
		t.Errorf("Shards diff %s, Parameters %d; want model.safetensors with %d", diff, m.Tensors.Parameters, 64*64+1)
	}

	m, err = c.Model(context.Background(), "org/bin", "main")
	if err != nil {
		t.Fatal(err)
	}
	if m.Tensors != nil || len(m.Warnings) != 1 || !strings.Contains(m.Warnings[0], "no safetensors") {
		t.Errorf("no safetensors: Tensors = %v, Warnings = %q", m.Tensors, m.Warnings)
	}
	// Its absence is cached as huggingface_hub records it, so offline knows too.
	noExist := filepath.Join(dir, "models--org--bin", ".no_exist", commitA)
	for _, name := range []string{"model.safetensors.index.json", "model.safetensors"} {
		if _, err := os.Stat(filepath.Join(noExist, name)); err != nil {
			t.Errorf(".no_exist/%s: %v", name, err)
		}
	}
	c.Offline = true
	m, err = c.Model(context.Background(), "org/bin", "main")
	if err != nil || m.Tensors != nil || len(m.Warnings) != 1 || !strings.Contains(m.Warnings[0], "no safetensors") {
		t.Errorf("offline: %v, %+v", err, m)
	}
}

func TestTotalSizeMismatchWarns(t *testing.T) {
	f := newFakeHub(t)
	repo := twoShardRepo()
	var idx map[string]any
	json.Unmarshal(repo.files["model.safetensors.index.json"], &idx)
	idx["metadata"] = map[string]any{"total_size": 12345}
	repo.files["model.safetensors.index.json"], _ = json.Marshal(idx)
	f.repos["org/two"] = repo
	c, _ := f.client("")
	m, err := c.Model(context.Background(), "org/two", "main")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Warnings) != 1 || !strings.Contains(m.Warnings[0], "12345") || !strings.Contains(m.Warnings[0], fmt.Sprint(twoShardCounts.StoredBytes)) {
		t.Errorf("Warnings = %q, want the total_size mismatch with both numbers", m.Warnings)
	}
}

func TestBadIndexRefused(t *testing.T) {
	for name, idx := range map[string]string{
		"escaping shard": `{"weight_map":{"w":"../../etc/passwd.safetensors"}}`,
		"absolute shard": `{"weight_map":{"w":"/x.safetensors"}}`,
		"empty map":      `{"weight_map":{}}`,
		"not json":       `{`,
		"bad total_size": `{"metadata":{"total_size":-1},"weight_map":{"w":"a.safetensors"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakeHub(t)
			f.repos["org/bad"] = &fakeRepo{commit: commitA, files: map[string][]byte{"config.json": testConfig, "model.safetensors.index.json": []byte(idx)}}
			c, _ := f.client(t.TempDir())
			if _, err := c.Model(context.Background(), "org/bad", "main"); !errors.Is(err, ErrMalformed) {
				t.Errorf("err = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestCorruptShardHeader(t *testing.T) {
	f := newFakeHub(t)
	shard := makeShard(tensorSpec{"w", "F32", []uint64{4}, 4})
	f.repos["org/cut"] = &fakeRepo{commit: commitA, files: map[string][]byte{"config.json": testConfig, "model.safetensors": shard[:len(shard)-4]}}
	c, _ := f.client(t.TempDir())
	_, err := c.Model(context.Background(), "org/cut", "main")
	if !errors.Is(err, ErrMalformed) || !errors.Is(err, safetensors.ErrTruncated) || !strings.Contains(err.Error(), `"w"`) {
		t.Errorf("err = %v, want ErrMalformed wrapping safetensors.ErrTruncated, naming the tensor", err)
	}
}

func TestNoCommitHeaderCachesNothing(t *testing.T) {
	f := newFakeHub(t)
	f.repos["org/two"] = twoShardRepo()
	f.noCommit = true
	dir := t.TempDir()
	c, _ := f.client(dir)
	m, err := c.Model(context.Background(), "org/two", "main")
	if err != nil {
		t.Fatal(err)
	}
	if m.Commit != "" || m.Tensors == nil || len(m.Warnings) != 1 {
		t.Errorf("Commit %q, Tensors %v, Warnings %q", m.Commit, m.Tensors, m.Warnings)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("cache written without a commit: %v", entries)
	}
}

func TestRevisionInURL(t *testing.T) {
	c := &Client{Endpoint: "https://hub.example/"}
	got := c.fileURL("org/name", "refs/pr/1", "sub dir/model.safetensors")
	want := "https://hub.example/org/name/resolve/refs%2Fpr%2F1/sub%20dir/model.safetensors"
	if got != want {
		t.Errorf("fileURL = %q, want %q", got, want)
	}
}

// TestSingleFileReadOnce: the header read that finds model.safetensors is
// the one counted, not read again, even with no cache.
func TestSingleFileReadOnce(t *testing.T) {
	f := newFakeHub(t)
	f.repos["org/one"] = &fakeRepo{commit: commitA, files: map[string][]byte{
		"config.json":       testConfig,
		"model.safetensors": makeShard(tensorSpec{"w", "BF16", []uint64{8, 8}, 2}),
	}}
	c, _ := f.client("")
	m, err := c.Model(context.Background(), "org/one", "main")
	if err != nil {
		t.Fatal(err)
	}
	var cdn int
	for _, r := range f.seen() {
		if r.host == mustHost(t, f.cdn.URL) {
			cdn++
		}
	}
	if cdn != 1 || m.Tensors.Parameters != 64 {
		t.Errorf("%d CDN requests, %d parameters; want 1, 64", cdn, m.Tensors.Parameters)
	}
}
