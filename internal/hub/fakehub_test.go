package hub

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// tensorSpec describes one tensor of a generated safetensors file.
type tensorSpec struct {
	name  string
	dtype string
	shape []uint64
	width int // bytes per element
}

// makeShard writes a safetensors file: a header for specs, laid out back to
// back, then zero bytes for the data.
func makeShard(specs ...tensorSpec) []byte {
	entries := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off uint64
	for _, s := range specs {
		n := uint64(s.width)
		for _, d := range s.shape {
			n *= d
		}
		entries[s.name] = map[string]any{"dtype": s.dtype, "shape": s.shape, "data_offsets": []uint64{off, off + n}}
		off += n
	}
	hdr, err := json.Marshal(entries)
	if err != nil {
		panic(err)
	}
	for len(hdr)%8 != 0 { // writers pad to 8 bytes, as safetensors does
		hdr = append(hdr, ' ')
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	out = append(out, hdr...)
	return append(out, make([]byte, off)...)
}

func makeIndex(totalSize int64, weightMap map[string]string) []byte {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": totalSize}, "weight_map": weightMap})
	return b
}

// fakeRepo is one repo of the fake Hub.
type fakeRepo struct {
	commit string
	files  map[string][]byte
	// gated repos answer 403 GatedRepo unless the request carries goodToken.
	gated bool
	// private repos answer 401 (no error code) unless the request carries goodToken.
	private bool
	// movedTo makes the Hub redirect (relative, same host) to another repo,
	// as it does for a renamed repo.
	movedTo string
}

const goodToken = "hf_s3cr3tT0k3nV4lu3"

type seenRequest struct {
	host, path, rng, auth string
	bytesSent             int
}

// fakeHub serves repos the way huggingface.co does: small files directly,
// with X-Repo-Commit and ETag; .safetensors files as a 302 to a CDN on
// another host, with X-Linked-Etag; errors with X-Error-Code.
type fakeHub struct {
	t     *testing.T
	hub   *httptest.Server
	cdn   *httptest.Server
	repos map[string]*fakeRepo

	mu       sync.Mutex
	requests []seenRequest
	// failures, by file name: a queue of statuses to answer before serving
	// it (for example 500, 500: the third try succeeds).
	failures map[string][]int
	// retryAfter is sent with 429 answers.
	retryAfter string
	// ignoreRange makes the CDN answer 200 with the whole file.
	ignoreRange bool
	// noCommit drops X-Repo-Commit, as a plain mirror would.
	noCommit bool

	// Hostile answers, as a compromised mirror or a man in the middle on
	// plain http could give them.
	//
	// commitHeader, when set, is sent as X-Repo-Commit instead of the
	// repo's commit ("../../../../elsewhere").
	commitHeader string
	// etagHeader, when set, is sent as the ETag of small files and the
	// X-Linked-Etag of shards.
	etagHeader string
	// unknownTotal makes the CDN answer a Range request with
	// "Content-Range: bytes first-last/*": no total size.
	unknownTotal bool
	// noLength makes the CDN ignore Range and stream the whole file with
	// no Content-Length (chunked): no total size either.
	noLength bool
	// gatedMessage, when set, writes the error message of a gated repo from
	// the request's Authorization header, so a test can echo the token
	// clipped, padded or wrapped in escape sequences.
	gatedMessage func(auth string) string
	// inject, when set, is asked before every Hub and CDN answer whether to
	// fail it: a status (500, 503…) or a body cut short.
	inject func(host string) fault
}

// fault is an injected failure: status != 0 answers that status; truncate
// sends half the body under the full Content-Length, then hangs up.
type fault struct {
	status   int
	truncate bool
}

// injected asks f.inject, under the lock, which fault to give.
func (f *fakeHub) injected(host string) fault {
	if f.inject == nil {
		return fault{}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inject(host)
}

// writeTruncated announces body's full length and sends half of it: the
// client sees an unexpected EOF.
func writeTruncated(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(http.StatusOK)
	w.Write(body[:len(body)/2])
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
		}
	}
}

func newFakeHub(t *testing.T) *fakeHub {
	f := &fakeHub{t: t, repos: map[string]*fakeRepo{}, failures: map[string][]int{}}
	f.cdn = httptest.NewServer(http.HandlerFunc(f.serveCDN))
	f.hub = httptest.NewServer(http.HandlerFunc(f.serveHub))
	t.Cleanup(f.hub.Close)
	t.Cleanup(f.cdn.Close)
	return f
}

// client returns a Client for the fake Hub with retries that do not sleep.
func (f *fakeHub) client(cacheDir string) (*Client, *[]time.Duration) {
	var slept []time.Duration
	var mu sync.Mutex
	c := &Client{
		Endpoint: f.hub.URL,
		CacheDir: cacheDir,
		Backoff:  time.Second,
		sleep: func(d time.Duration, _ <-chan struct{}) bool {
			mu.Lock()
			defer mu.Unlock()
			slept = append(slept, d)
			return true
		},
	}
	return c, &slept
}

func (f *fakeHub) record(r *http.Request, sent int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, seenRequest{host: r.Host, path: r.URL.Path, rng: r.Header.Get("Range"), auth: r.Header.Get("Authorization"), bytesSent: sent})
}

func (f *fakeHub) seen() []seenRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seenRequest(nil), f.requests...)
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func (f *fakeHub) serveHub(w http.ResponseWriter, r *http.Request) {
	f.record(r, 0)
	// /{org}/{name}/resolve/{revision}/{file...}, revision escaped whole.
	parts := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	if len(parts) < 5 || parts[2] != "resolve" {
		http.Error(w, "bad path", http.StatusBadRequest)
		return
	}
	id := parts[0] + "/" + parts[1]
	rev, _ := url.PathUnescape(parts[3])
	file, _ := url.PathUnescape(strings.Join(parts[4:], "/"))
	repo, ok := f.repos[id]
	authed := r.Header.Get("Authorization") == "Bearer "+goodToken
	fail := func(status int, code, msg string) {
		if code != "" {
			w.Header().Set("X-Error-Code", code)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]string{"error": msg})
	}
	switch {
	case !ok && !authed:
		fail(401, "RepoNotFound", "Repository Not Found for url: "+r.URL.String()+". Invalid username or password.")
		return
	case !ok:
		fail(404, "RepoNotFound", "Repository Not Found")
		return
	case repo.gated && !authed && f.gatedMessage != nil:
		fail(403, "GatedRepo", f.gatedMessage(r.Header.Get("Authorization")))
		return
	case repo.gated && !authed:
		// The Hub echoes nothing secret, but a careless proxy might: echo
		// the Authorization header to prove it is redacted.
		fail(403, "GatedRepo", "Access to model "+id+" is restricted and you are not in the authorized list. "+r.Header.Get("Authorization"))
		return
	case repo.private && !authed:
		fail(401, "", "Invalid credentials in Authorization header")
		return
	case repo.movedTo != "":
		w.Header().Set("Location", "/"+repo.movedTo+"/resolve/"+parts[3]+"/"+strings.Join(parts[4:], "/"))
		w.WriteHeader(http.StatusTemporaryRedirect)
		return
	case rev != "main" && rev != repo.commit:
		fail(404, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	f.mu.Lock()
	var status int
	if q := f.failures[file]; len(q) > 0 {
		status, f.failures[file] = q[0], q[1:]
	}
	f.mu.Unlock()
	inj := f.injected("hub")
	if inj.status != 0 {
		status = inj.status
	}
	if status != 0 {
		if status == 429 && f.retryAfter != "" {
			w.Header().Set("Retry-After", f.retryAfter)
		}
		fail(status, "", http.StatusText(status))
		return
	}
	body, ok := repo.files[file]
	if !ok {
		fail(404, "EntryNotFound", file+" does not exist on \""+rev+"\"")
		return
	}
	switch {
	case f.commitHeader != "":
		w.Header().Set("X-Repo-Commit", f.commitHeader)
	case !f.noCommit:
		w.Header().Set("X-Repo-Commit", repo.commit)
	}
	if strings.HasSuffix(file, ".safetensors") {
		w.Header().Set("X-Linked-Etag", firstNonEmpty(f.etagHeader, `"`+sha(body)+`"`))
		w.Header().Set("X-Linked-Size", fmt.Sprint(len(body)))
		w.Header().Set("Location", f.cdn.URL+"/blobs/"+sha(body)+"?id="+url.QueryEscape(id)+"&file="+url.QueryEscape(file))
		w.WriteHeader(http.StatusFound)
		return
	}
	git := sha256.Sum256(append([]byte("blob "), body...))
	w.Header().Set("ETag", firstNonEmpty(f.etagHeader, `"`+hex.EncodeToString(git[:20])+`"`))
	if inj.truncate {
		writeTruncated(w, body)
		return
	}
	w.Write(body)
}

// countingWriter counts the body bytes a handler sends.
type countingWriter struct {
	http.ResponseWriter
	n int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n += n
	return n, err
}

func (f *fakeHub) serveCDN(w http.ResponseWriter, r *http.Request) {
	cw := &countingWriter{ResponseWriter: w}
	defer func() { f.record(r, cw.n) }()
	repo, ok := f.repos[r.URL.Query().Get("id")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	body, ok := repo.files[r.URL.Query().Get("file")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	inj := f.injected("cdn")
	switch {
	case inj.status != 0:
		http.Error(cw, http.StatusText(inj.status), inj.status)
		return
	case inj.truncate:
		first, last, ok := parseRange(r.Header.Get("Range"), len(body))
		if !ok {
			first, last = 0, len(body)-1
		}
		cw.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", first, last, len(body)))
		cw.Header().Set("Content-Length", fmt.Sprint(last-first+1))
		cw.WriteHeader(http.StatusPartialContent)
		cw.Write(body[first : first+(last-first+1)/2])
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
			}
		}
		return
	}
	if f.unknownTotal {
		first, last, ok := parseRange(r.Header.Get("Range"), len(body))
		if !ok {
			http.Error(cw, "want a Range", http.StatusBadRequest)
			return
		}
		cw.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/*", first, last))
		cw.WriteHeader(http.StatusPartialContent)
		cw.Write(body[first : last+1])
		return
	}
	if f.noLength {
		// Flushing before the end makes net/http send the body chunked,
		// without a Content-Length.
		cw.WriteHeader(http.StatusOK)
		cw.Write(body[:min(16, len(body))])
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
		cw.Write(body[min(16, len(body)):])
		return
	}
	if f.ignoreRange {
		cw.Header().Set("Content-Length", fmt.Sprint(len(body)))
		for off := 0; off < len(body); off += 64 << 10 {
			if _, err := cw.Write(body[off:min(off+64<<10, len(body))]); err != nil {
				return // the client hung up, as it should once it has the header
			}
		}
		return
	}
	http.ServeContent(cw, r, "", time.Time{}, bytes.NewReader(body))
}

// parseRange reads "bytes=first-last" against a body of n bytes, clamping
// last to the end as a server does.
func parseRange(h string, n int) (first, last int, ok bool) {
	spec, ok := strings.CutPrefix(h, "bytes=")
	a, b, ok2 := strings.Cut(spec, "-")
	if !ok || !ok2 {
		return 0, 0, false
	}
	first, err1 := strconv.Atoi(a)
	last, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || first > last || first >= n {
		return 0, 0, false
	}
	return first, min(last, n-1), true
}
