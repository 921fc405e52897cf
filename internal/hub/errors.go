package hub

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Sentinel errors callers branch on. Errors returned by this package wrap
// one of them (errors.Is) inside an *Error that says which repo and file, and
// what to do next.
var (
	// ErrGated: the repo is gated and this token (or no token) has no access.
	ErrGated = errors.New("gated repo")
	// ErrUnauthorized: the Hub refused the request (401/403): private repo,
	// invalid token, or a token without read access.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrNotFound: no such repo, revision or file.
	ErrNotFound = errors.New("not found")
	// ErrRateLimited: the Hub answered 429 after every retry, or asked to
	// wait longer than this client is willing to.
	ErrRateLimited = errors.New("rate limited")
	// ErrOffline: offline mode, and what was asked is not in the cache.
	ErrOffline = errors.New("not available offline")
	// ErrUnavailable: the Hub kept failing (5xx, timeouts, network errors)
	// through every retry.
	ErrUnavailable = errors.New("hub unavailable")
	// ErrInvalidID: the model id or revision is not one the Hub could hold;
	// refused before any request, since both become URL and cache paths.
	ErrInvalidID = errors.New("invalid model id")
	// ErrMalformed: the Hub or the cache returned a file that does not parse
	// (an index without weight_map, a shard name that escapes the repo), or
	// an answer no real Hub gives and this package refuses (an X-Repo-Commit
	// that is not a commit hash, an ETag that is a path, a shard whose total
	// size is not stated).
	ErrMalformed = errors.New("malformed response")
)

// Error is a failure to get a file of a model, with a hint for the user.
type Error struct {
	// Kind is the sentinel this error wraps.
	Kind error
	// Repo, Revision and File say what was being fetched; File may be empty.
	Repo, Revision, File string
	// Status is the HTTP status, 0 when there was no response.
	Status int
	// Code is the Hub's X-Error-Code (GatedRepo, RepoNotFound,
	// RevisionNotFound, EntryNotFound), empty if it sent none.
	Code string
	// Message is the Hub's own explanation (X-Error-Message or the body's
	// "error"), token redacted.
	Message string
	// Hint says what to do next, for example "request access on the model
	// page, then set HF_TOKEN".
	Hint string
	// RetryAfter is how long the Hub asked to wait (429), 0 if it did not say.
	RetryAfter time.Duration
	// Err is an underlying cause (a network error), if any.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("hub: ")
	if e.File != "" {
		fmt.Fprintf(&b, "%s of ", e.File)
	}
	b.WriteString(e.Repo)
	if e.Revision != "" {
		fmt.Fprintf(&b, "@%s", e.Revision)
	}
	fmt.Fprintf(&b, ": %s", e.Cause())
	if e.Hint != "" {
		fmt.Fprintf(&b, "; %s", e.Hint)
	}
	return b.String()
}

// Cause says what went wrong without where or what to do next: the sentinel,
// the HTTP status, the Hub's message and the underlying error. A caller that
// names the repo itself and prints Hint apart (the CLI's "Try:") uses it
// instead of Error.
func (e *Error) Cause() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v", e.Kind)
	if e.Status != 0 {
		fmt.Fprintf(&b, " (HTTP %d)", e.Status)
	}
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

// Unwrap returns the sentinel and the cause, so errors.Is matches either.
func (e *Error) Unwrap() []error {
	if e.Err != nil {
		return []error{e.Kind, e.Err}
	}
	return []error{e.Kind}
}

// maxErrorBody bounds how much of an error response is read for its message.
const maxErrorBody = 4 << 10

// classify turns a non-success Hub response into an *Error. The Hub says
// what went wrong in X-Error-Code (GatedRepo, RepoNotFound,
// RevisionNotFound, EntryNotFound), which huggingface_hub also trusts over
// the status code: it answers 401, not 404, for a repo that does not exist
// when the request carries no token.
func (c *Client) classify(resp *http.Response, body []byte, repo, rev, file string) *Error {
	e := &Error{Repo: repo, Revision: rev, File: file, Status: resp.StatusCode}
	code := resp.Header.Get("X-Error-Code")
	e.Code = code
	e.Message = c.outsideText(errorMessage(resp, body))
	page := c.endpoint() + "/" + repo
	lower := strings.ToLower(e.Message)
	gatedText := strings.Contains(lower, "gated") || strings.Contains(lower, "restricted")
	switch {
	case code == "GatedRepo" || ((resp.StatusCode == 401 || resp.StatusCode == 403) && gatedText):
		e.Kind = ErrGated
		if c.Token == "" {
			e.Hint = fmt.Sprintf("request access on the model page %s, then set HF_TOKEN", page)
		} else {
			e.Hint = fmt.Sprintf("this token has no access yet: request access on the model page %s (approval can take a while), then retry", page)
		}
	case code == "RepoNotFound":
		e.Kind = ErrNotFound
		e.Hint = "check the id"
		if c.Token == "" {
			e.Hint += "; if the repo is private, set HF_TOKEN"
		}
	case code == "RevisionNotFound":
		e.Kind = ErrNotFound
		e.Hint = fmt.Sprintf("check the revision %q (a branch, tag or commit of %s)", rev, repo)
	case resp.StatusCode == http.StatusNotFound:
		e.Kind = ErrNotFound
		e.Hint = "check the id/revision"
	case resp.StatusCode == http.StatusUnauthorized:
		e.Kind = ErrUnauthorized
		if c.Token == "" {
			e.Hint = "the repo is private or does not exist: check the id, or set HF_TOKEN to a token with read access"
		} else {
			e.Hint = "the token was refused: check HF_TOKEN (or the file at HF_TOKEN_PATH)"
		}
	case resp.StatusCode == http.StatusForbidden:
		e.Kind = ErrUnauthorized
		e.Hint = "the token lacks permission for this repo: use a token with read access"
	case resp.StatusCode == http.StatusTooManyRequests:
		e.Kind = ErrRateLimited
		e.RetryAfter = retryAfter(resp)
		e.Hint = "wait and retry; requests with an HF_TOKEN get a higher limit"
		if e.RetryAfter > 0 {
			e.Hint = fmt.Sprintf("the Hub asks to wait %s; requests with an HF_TOKEN get a higher limit", e.RetryAfter)
		}
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusRequestTimeout:
		e.Kind = ErrUnavailable
		e.Hint = "the Hub is failing; retry later, or use --offline with a cached model"
	default:
		e.Kind = ErrMalformed
		e.Hint = "unexpected answer from the Hub; check HF_ENDPOINT"
	}
	return e
}

// errorMessage extracts the Hub's explanation of an error, unclipped (the
// body is bounded by maxErrorBody, a header by the HTTP client): the caller
// redacts the token first, then clips.
func errorMessage(resp *http.Response, body []byte) string {
	if m := resp.Header.Get("X-Error-Message"); m != "" {
		return m
	}
	var j struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &j) == nil && j.Error != "" {
		return j.Error
	}
	return ""
}

// maxMessage bounds the Hub's message in an error.
const maxMessage = 300

// outsideText makes text from a server fit to print: the token redacted
// first (a clip through the token would leave a piece of it that no longer
// matches the whole), whitespace folded to single spaces, what could drive
// a terminal escaped, the token redacted again (an escape such as \x00
// can join a piece of it to its neighbours), then clipped to maxMessage
// bytes.
func (c *Client) outsideText(s string) string {
	return clip(c.redact(printable(strings.Join(strings.Fields(c.redact(s)), " "))))
}

// clip keeps the first maxMessage bytes of s, cut on a character boundary.
func clip(s string) string {
	if len(s) > maxMessage {
		cut := maxMessage
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// printable escapes what could drive a terminal in text from outside:
// control characters (an ESC starts a sequence that can retitle the window,
// clear the screen or rewrite what was printed), C1 controls, the
// bidirectional overrides that reorder what is shown, and invalid UTF-8.
// Each is written as Go escapes it (\x1b, \u202e).
func printable(s string) string {
	if !strings.ContainsFunc(s, unprintable) && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError:
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				fmt.Fprintf(&b, `\x%02x`, s[i])
				continue
			}
			b.WriteRune(r)
		case unprintable(r):
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// unprintable reports a rune printable must escape.
func unprintable(r rune) bool {
	return unicode.IsControl(r) || // C0, DEL and C1
		(r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069') || // bidi embeddings, overrides, isolates
		r == '\u200e' || r == '\u200f' || r == '\u061c' // bidi marks
}

// retryAfter reads a Retry-After in seconds or as an HTTP date. A date is
// measured from the response's own Date header, so neither the local clock
// nor clock skew with the server matters; without a Date header it is
// treated as absent.
func retryAfter(resp *http.Response) time.Duration {
	v := strings.TrimSpace(resp.Header.Get("Retry-After"))
	if secs, err := strconv.Atoi(v); err == nil {
		if secs < 0 {
			return 0
		}
		return time.Duration(secs) * time.Second
	}
	at, err1 := http.ParseTime(v)
	now, err2 := http.ParseTime(resp.Header.Get("Date"))
	if err1 != nil || err2 != nil || !at.After(now) {
		return 0
	}
	return at.Sub(now)
}
