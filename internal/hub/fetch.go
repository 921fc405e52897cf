package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/canifinetune/canifinetune/internal/localfile"
)

// maxRedirects bounds a redirect chain; the Hub uses one (to its CDN) or two
// (a renamed repo, then the CDN).
const maxRedirects = 10

// maxJSONFile bounds config.json and index files: the largest real index
// (hundreds of shards, tens of thousands of tensors) is a few MB. It is the
// cap local copies of the same files get.
const maxJSONFile = localfile.MaxJSON

// fetched is a successful response, read.
type fetched struct {
	body []byte
	// commit is X-Repo-Commit, the commit the revision resolved to.
	commit string
	// etag is X-Linked-Etag (the LFS file's sha256) or ETag, from the Hub's
	// own response rather than the CDN's; it names the blob in the cache.
	etag string
	// size is the whole file's size when known (Content-Range total or
	// Content-Length of a 200), -1 otherwise.
	size int64
}

// byteRange is an inclusive HTTP byte range.
type byteRange struct{ first, last int64 }

// fileURL is {endpoint}/{repo}/resolve/{revision}/{file}, the revision
// escaped whole (as huggingface_hub does, so "refs/pr/1" stays one segment).
func (c *Client) fileURL(repo, rev, file string) string {
	parts := strings.Split(file, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return fmt.Sprintf("%s/%s/resolve/%s/%s", c.endpoint(), repo, url.PathEscape(rev), strings.Join(parts, "/"))
}

// get fetches a file, whole (rng nil, at most maxJSONFile bytes) or a byte
// range, retrying 5xx, 429 and network failures a bounded number of times.
func (c *Client) get(ctx context.Context, repo, rev, file string, rng *byteRange) (*fetched, error) {
	var last error
	wait := c.backoff()
	for try := 1; ; try++ {
		f, err, retry := c.getOnce(ctx, repo, rev, file, rng)
		if err == nil {
			return f, nil
		}
		last = err
		if !retry || try >= c.tries() || ctx.Err() != nil {
			break
		}
		d := wait
		var he *Error
		if errors.As(err, &he) && he.RetryAfter > 0 {
			d = he.RetryAfter
		}
		if d > c.maxRetryWait() {
			break // the Hub asks for longer than we wait: say so now
		}
		if !c.wait(ctx, d) {
			break
		}
		wait *= 2
	}
	return nil, last
}

func (c *Client) wait(ctx context.Context, d time.Duration) bool {
	if c.sleep != nil {
		return c.sleep(d, ctx.Done())
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// getOnce makes one attempt, following redirects by hand: Go's client would
// follow them too, but then the X-Repo-Commit and X-Linked-Etag of the Hub's
// redirect response would be lost, and which hosts receive the token would
// rest on the caller's http.Client. It reports whether a failure is worth
// retrying.
func (c *Client) getOnce(ctx context.Context, repo, rev, file string, rng *byteRange) (f *fetched, err error, retry bool) {
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout())
	defer cancel()
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	noFollow := *hc
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	origin, err := url.Parse(c.endpoint())
	if err != nil {
		return nil, &Error{Kind: ErrMalformed, Repo: repo, Revision: rev, File: file, Err: fmt.Errorf("endpoint %q: %w", c.endpoint(), err)}, false
	}
	target := c.fileURL(repo, rev, file)
	f = &fetched{size: -1}
	for hop := 0; ; hop++ {
		if hop > maxRedirects {
			return nil, &Error{Kind: ErrMalformed, Repo: repo, Revision: rev, File: file, Hint: "too many redirects; check HF_ENDPOINT"}, false
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return nil, &Error{Kind: ErrMalformed, Repo: repo, Revision: rev, File: file, Err: err}, false
		}
		req.Header.Set("User-Agent", "canifinetune")
		if rng != nil {
			req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", rng.first, rng.last))
		}
		// The token goes to the Hub only: a redirect to another host (the
		// CDN serving LFS files, or anything a compromised mirror names)
		// must not receive it, and neither may plain http on the same host.
		if c.Token != "" && req.URL.Scheme == origin.Scheme && req.URL.Host == origin.Host {
			req.Header.Set("Authorization", "Bearer "+string(c.Token))
		}
		resp, err := noFollow.Do(req)
		if err != nil {
			// Retryable: a per-attempt timeout or a reset connection. get
			// stops retrying once the caller's own context is done.
			return nil, &Error{Kind: ErrUnavailable, Repo: repo, Revision: rev, File: file,
				Err: c.outsideErr(ctx, stripURL(err)), Hint: "check the network, or use --offline with a cached model"}, true
		}
		// Both headers become cache paths (snapshots/<commit>, blobs/<etag>)
		// and the commit is echoed in reports: what could name another
		// directory is refused here, before anything is written.
		if f.commit == "" {
			if v := resp.Header.Get("X-Repo-Commit"); v != "" {
				if !isCommit(v) {
					drain(resp)
					return nil, hostileHeader(repo, rev, file, resp.StatusCode, "X-Repo-Commit", v, "is not a commit hash (40 lowercase hex digits)"), false
				}
				f.commit = v
			}
		}
		if f.etag == "" {
			name := "X-Linked-Etag"
			v := resp.Header.Get(name)
			if v == "" {
				name, v = "ETag", resp.Header.Get("ETag")
			}
			if v != "" {
				if !etagIsName(v) {
					drain(resp)
					return nil, hostileHeader(repo, rev, file, resp.StatusCode, name, v, "could name a path, not a file"), false
				}
				f.etag = v
			}
		}
		switch resp.StatusCode {
		case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
			loc, err := resp.Location()
			drain(resp)
			if err != nil {
				return nil, &Error{Kind: ErrMalformed, Repo: repo, Revision: rev, File: file, Status: resp.StatusCode, Err: errors.New("redirect without a valid Location")}, false
			}
			target = loc.String()
			continue
		case http.StatusOK, http.StatusPartialContent:
			err := readBody(resp, rng, f)
			resp.Body.Close()
			if err != nil {
				// A body cut short is worth another try; one that is too
				// large or mislabelled will be the same next time.
				var bad badBody
				if errors.As(err, &bad) {
					return nil, &Error{Kind: ErrMalformed, Repo: repo, Revision: rev, File: file, Status: resp.StatusCode, Err: c.outsideErr(ctx, err.Error())}, false
				}
				return nil, &Error{Kind: ErrUnavailable, Repo: repo, Revision: rev, File: file, Status: resp.StatusCode, Err: c.outsideErr(ctx, err.Error())}, true
			}
			return f, nil, false
		case http.StatusRequestedRangeNotSatisfiable:
			drain(resp)
			// Only a range starting at or past the end is refused: the file
			// is shorter than its own header says.
			return nil, &Error{Kind: ErrMalformed, Repo: repo, Revision: rev, File: file, Status: resp.StatusCode,
				Err: errors.New("file ends before its safetensors header")}, false
		default:
			body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
			resp.Body.Close()
			e := c.classify(resp, body, repo, rev, file)
			retry := e.Kind == ErrRateLimited || e.Kind == ErrUnavailable
			return nil, e, retry
		}
	}
}

// readBody reads a 200 or 206 body: a whole file up to maxJSONFile, or the
// asked range. A server that ignores Range answers 200 with the whole file;
// only the bytes asked for are read before the connection is dropped, so
// the weights are never downloaded.
func readBody(resp *http.Response, rng *byteRange, f *fetched) error {
	if rng == nil {
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxJSONFile+1))
		if err != nil {
			return fmt.Errorf("read body: %w", err)
		}
		if len(b) > maxJSONFile {
			return badBody(fmt.Sprintf("file larger than %d bytes", maxJSONFile))
		}
		f.body = b
		return nil
	}
	want := rng.last - rng.first + 1
	body := resp.Body
	if resp.StatusCode == http.StatusOK {
		f.size = resp.ContentLength
		if _, err := io.CopyN(io.Discard, body, rng.first); err != nil {
			if errors.Is(err, io.EOF) {
				f.body = nil
				return nil
			}
			return fmt.Errorf("skip to byte %d: %w", rng.first, err)
		}
	} else {
		first, total, err := parseContentRange(resp.Header.Get("Content-Range"))
		if err != nil {
			return err
		}
		if first != rng.first {
			return badBody(fmt.Sprintf("asked for bytes from %d, got a range from %d", rng.first, first))
		}
		f.size = total
	}
	b, err := io.ReadAll(io.LimitReader(body, want))
	if err != nil {
		return fmt.Errorf("read range: %w", err)
	}
	f.body = b
	return nil
}

// outsideErr is a transport or body error as text fit to print (token
// redacted, control characters escaped; the error itself is not kept, since
// its text may carry a signed URL or an echo), still wrapping the request
// context's error when the request was cancelled or timed out, so callers
// can tell a cancellation their own code caused from a Hub failure.
func (c *Client) outsideErr(ctx context.Context, text string) error {
	return &textError{text: c.redact(printable(c.redact(text))), cause: ctx.Err()}
}

// textError is an error's sanitised text and, possibly, its cause.
type textError struct {
	text  string
	cause error
}

func (e *textError) Error() string { return e.text }
func (e *textError) Unwrap() error { return e.cause }

// hostileHeader is an answer whose header could steer a cache path: no
// retry fixes it, and the user should know which header and value.
func hostileHeader(repo, rev, file string, status int, header, value, why string) *Error {
	return &Error{Kind: ErrMalformed, Repo: repo, Revision: rev, File: file, Status: status,
		Err:  fmt.Errorf("refusing the answer: header %s %s %s", header, quoteClipped(value), why),
		Hint: "the Hub answered what huggingface.co never does; check HF_ENDPOINT (and use https)"}
}

// quoteClipped quotes a value from outside for an error message: escaped
// (no control character reaches the terminal) and at most 100 bytes.
func quoteClipped(v string) string {
	if len(v) > 100 {
		return strconv.Quote(v[:100]) + "…"
	}
	return strconv.Quote(v)
}

// badBody is a response body that no retry will fix.
type badBody string

func (b badBody) Error() string { return string(b) }

// parseContentRange reads "bytes first-last/total"; total is -1 for "*".
func parseContentRange(s string) (first, total int64, err error) {
	spec, ok := strings.CutPrefix(s, "bytes ")
	r, tot, ok2 := strings.Cut(spec, "/")
	a, _, ok3 := strings.Cut(r, "-")
	bad := badBody(fmt.Sprintf("bad Content-Range %q", s))
	if !ok || !ok2 || !ok3 {
		return 0, 0, bad
	}
	if first, err = strconv.ParseInt(a, 10, 64); err != nil || first < 0 {
		return 0, 0, bad
	}
	total = -1
	if tot != "*" {
		if total, err = strconv.ParseInt(tot, 10, 64); err != nil || total < 0 {
			return 0, 0, bad
		}
	}
	return first, total, nil
}

// drain discards a small body so the connection can be reused.
func drain(resp *http.Response) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
}

// stripURL keeps a transport error's cause but not its URL, which could name
// a signed CDN link.
func stripURL(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Sprintf("%s: %v", ue.Op, ue.Err)
	}
	return err.Error()
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
