package hub

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultEndpoint is the Hub huggingface_hub talks to when HF_ENDPOINT is unset.
const DefaultEndpoint = "https://huggingface.co"

// Defaults for the bounds a zero Client field stands for.
const (
	DefaultTries          = 3
	DefaultRequestTimeout = 30 * time.Second
	DefaultDeadline       = 5 * time.Minute
	DefaultBackoff        = time.Second
	DefaultMaxRetryWait   = 30 * time.Second
	DefaultConcurrency    = 8
)

// Token is a Hub access token. It formats as "[redacted]" with every fmt
// verb, in JSON and in slog, so printing a Client or an Options struct by
// mistake cannot leak it; only the Authorization header sees the value.
type Token string

const redacted = "[redacted]"

// String returns "[redacted]".
func (Token) String() string { return redacted }

// GoString returns "[redacted]", for %#v.
func (Token) GoString() string { return redacted }

// Format writes "[redacted]" whatever the verb (%s, %v, %q, %x…).
func (Token) Format(f fmt.State, _ rune) { io.WriteString(f, redacted) }

// MarshalJSON writes "[redacted]".
func (Token) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// LogValue keeps the token out of structured logs.
func (Token) LogValue() slog.Value { return slog.StringValue(redacted) }

// Client reads models from a Hub endpoint and a huggingface_hub cache. The
// zero value of each optional field picks the default named in its comment.
type Client struct {
	// HTTP does the requests; nil means a client with no overall timeout
	// (this Client bounds each request itself). Its CheckRedirect is not
	// used: Client follows redirects itself to control the Authorization
	// header.
	HTTP *http.Client
	// Endpoint is the Hub's base URL; "" means DefaultEndpoint.
	Endpoint string
	// Token is sent as "Authorization: Bearer" to Endpoint's scheme and host
	// only. Empty: anonymous.
	Token Token
	// CacheDir is the huggingface_hub cache (HF_HUB_CACHE); "" disables the
	// cache.
	CacheDir string
	// Offline forbids the network: everything comes from CacheDir.
	Offline bool
	// Progress receives one line per shard header when a model has several
	// shards; nil for none. The CLI passes stderr when it is a terminal.
	Progress io.Writer

	// Tries bounds the attempts per request on 5xx, 429 and network errors
	// (DefaultTries).
	Tries int
	// RequestTimeout bounds one attempt, redirects included (DefaultRequestTimeout).
	RequestTimeout time.Duration
	// Deadline bounds a whole Model call (DefaultDeadline).
	Deadline time.Duration
	// Backoff is the wait before the first retry; it doubles each retry
	// (DefaultBackoff).
	Backoff time.Duration
	// MaxRetryWait is the longest this client waits before a retry, even
	// when a 429's Retry-After asks for more; past it the request fails with
	// ErrRateLimited (DefaultMaxRetryWait).
	MaxRetryWait time.Duration
	// Concurrency bounds the shard headers read at once (DefaultConcurrency).
	Concurrency int

	// sleep waits between retries; tests replace it to run instantly.
	sleep func(d time.Duration, done <-chan struct{}) bool
}

// NewFromEnv builds a Client configured the way huggingface_hub reads its
// environment: HF_ENDPOINT, HF_TOKEN (or the legacy HUGGING_FACE_HUB_TOKEN,
// else the file at HF_TOKEN_PATH, default $HF_HOME/token), HF_HOME (default
// $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface), HF_HUB_CACHE
// (default $HF_HOME/hub) and HF_HUB_OFFLINE (1/ON/YES/TRUE). getenv is
// os.Getenv in the CLI and a map in tests.
func NewFromEnv(getenv func(string) string) (*Client, error) {
	c := &Client{Endpoint: DefaultEndpoint}
	if e := strings.TrimSpace(getenv("HF_ENDPOINT")); e != "" {
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("HF_ENDPOINT %q is not an http(s) URL; unset it to use %s", e, DefaultEndpoint)
		}
		c.Endpoint = strings.TrimSuffix(e, "/")
	}
	home := expandHome(getenv("HF_HOME"), getenv)
	if home == "" {
		base := getenv("XDG_CACHE_HOME")
		if base == "" {
			h := getenv("HOME")
			if h == "" {
				return nil, errors.New("cannot find the Hugging Face cache: set HF_HOME (or HOME)")
			}
			base = filepath.Join(h, ".cache")
		}
		home = filepath.Join(base, "huggingface")
	}
	c.CacheDir = expandHome(getenv("HF_HUB_CACHE"), getenv)
	if c.CacheDir == "" {
		c.CacheDir = expandHome(getenv("HUGGINGFACE_HUB_CACHE"), getenv)
	}
	if c.CacheDir == "" {
		c.CacheDir = filepath.Join(home, "hub")
	}
	switch strings.ToUpper(strings.TrimSpace(getenv("HF_HUB_OFFLINE"))) {
	case "1", "ON", "YES", "TRUE":
		c.Offline = true
	}
	tok := strings.TrimSpace(getenv("HF_TOKEN"))
	if tok == "" {
		tok = strings.TrimSpace(getenv("HUGGING_FACE_HUB_TOKEN"))
	}
	if tok == "" {
		path := expandHome(getenv("HF_TOKEN_PATH"), getenv)
		if path == "" {
			path = filepath.Join(home, "token")
		}
		b, err := readTokenFile(path)
		switch {
		case err == nil:
			tok = strings.TrimSpace(string(b))
		case !errors.Is(err, fs.ErrNotExist):
			// The path is safe to show; the content never is.
			return nil, fmt.Errorf("read the Hugging Face token at %s: %w; fix it or set HF_TOKEN_PATH to the token file", path, err)
		}
	}
	c.Token = Token(tok)
	return c, nil
}

// expandHome expands a leading "~/" as huggingface_hub does with expanduser.
func expandHome(p string, getenv func(string) string) string {
	p = strings.TrimSpace(p)
	if p == "~" || strings.HasPrefix(p, "~/") {
		if h := getenv("HOME"); h != "" {
			return filepath.Join(h, p[1:])
		}
	}
	return p
}

func (c *Client) endpoint() string {
	if c.Endpoint == "" {
		return DefaultEndpoint
	}
	return strings.TrimSuffix(c.Endpoint, "/")
}

func (c *Client) tries() int       { return orDefault(c.Tries, DefaultTries) }
func (c *Client) concurrency() int { return orDefault(c.Concurrency, DefaultConcurrency) }
func (c *Client) requestTimeout() time.Duration {
	return orDefault(c.RequestTimeout, DefaultRequestTimeout)
}
func (c *Client) deadline() time.Duration     { return orDefault(c.Deadline, DefaultDeadline) }
func (c *Client) backoff() time.Duration      { return orDefault(c.Backoff, DefaultBackoff) }
func (c *Client) maxRetryWait() time.Duration { return orDefault(c.MaxRetryWait, DefaultMaxRetryWait) }

func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// minTokenPiece is the shortest run of a token's characters that redact
// removes when it is not the whole token: a server (or a clip) that cut the
// echo short must not print all but the last few characters, while a
// shorter run ("hf_", a few hex digits) is too common to be evidence.
const minTokenPiece = 6

// redact removes the token from text that came from outside (a server's
// error message could echo a request header back): the whole token, and
// any run of at least minTokenPiece of its characters, so an echo cut
// short at either end is redacted too. Run it before clipping a message.
func (c *Client) redact(s string) string {
	tok := string(c.Token)
	if tok == "" {
		return s
	}
	s = strings.ReplaceAll(s, tok, redacted)
	k := min(minTokenPiece, len(tok))
	var b strings.Builder
	for i := 0; i < len(s); {
		// The longest run of the token's characters starting at i.
		n := 0
		if i+k <= len(s) && strings.Contains(tok, s[i:i+k]) {
			n = k
			for i+n < len(s) && strings.Contains(tok, s[i:i+n+1]) {
				n++
			}
		}
		if n == 0 {
			b.WriteByte(s[i])
			i++
			continue
		}
		b.WriteString(redacted)
		i += n
	}
	return b.String()
}

// maxTokenFile bounds the token file: a token is tens of bytes, and
// HF_TOKEN_PATH=/dev/zero must not exhaust memory.
const maxTokenFile = 64 << 10

// readTokenFile reads the token file, refusing what cannot be one: a
// device, a FIFO (whose open or read would block), a directory, anything
// over maxTokenFile bytes.
func readTokenFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	if fi.Size() > maxTokenFile {
		return nil, fmt.Errorf("%d bytes, more than a token file's %d", fi.Size(), maxTokenFile)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Checked again on the open file, in case the path changed meanwhile.
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxTokenFile {
		return nil, fmt.Errorf("more than a token file's %d bytes", maxTokenFile)
	}
	return b, nil
}
