package hub

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		status     int
		code, msg  string
		retryAfter string
		token      Token
		want       error
		hint       string
	}{
		{401, "GatedRepo", "Access to model x is restricted.", "", "", ErrGated, "then set HF_TOKEN"},
		{403, "", "Access to model org/x is restricted and you are not in the authorized list.", "", "hf_t", ErrGated, "request access"},
		{401, "", "This repo is gated", "", "", ErrGated, "request access"},
		{403, "", "Forbidden", "", "hf_t", ErrUnauthorized, "permission"},
		{404, "EntryNotFound", "", "", "", ErrNotFound, "check the id/revision"},
		{404, "", "", "", "", ErrNotFound, "check the id/revision"},
		{429, "", "", "12", "", ErrRateLimited, "wait 12s"},
		{503, "", "", "", "", ErrUnavailable, "retry later"},
		{408, "", "", "", "", ErrUnavailable, "retry later"},
		{418, "", "", "", "", ErrMalformed, "HF_ENDPOINT"},
	}
	for _, tt := range tests {
		resp := &http.Response{StatusCode: tt.status, Header: http.Header{}}
		if tt.code != "" {
			resp.Header.Set("X-Error-Code", tt.code)
		}
		if tt.retryAfter != "" {
			resp.Header.Set("Retry-After", tt.retryAfter)
		}
		c := &Client{Token: tt.token}
		e := c.classify(resp, []byte(`{"error":"`+tt.msg+`"}`), "org/x", "main", "config.json")
		if !errors.Is(e, tt.want) || !strings.Contains(e.Hint, tt.hint) {
			t.Errorf("%d %s %q: got %v (hint %q), want %v with %q", tt.status, tt.code, tt.msg, e.Kind, e.Hint, tt.want, tt.hint)
		}
	}
}

func TestParseContentRange(t *testing.T) {
	tests := []struct {
		in           string
		first, total int64
		ok           bool
	}{
		{"bytes 0-7/1000", 0, 1000, true},
		{"bytes 8-99/*", 8, -1, true},
		{"bytes */1000", 0, 0, false},
		{"0-7/1000", 0, 0, false},
		{"bytes -1-7/1000", 0, 0, false},
		{"bytes 0-7/x", 0, 0, false},
		{"", 0, 0, false},
	}
	for _, tt := range tests {
		first, total, err := parseContentRange(tt.in)
		if (err == nil) != tt.ok || (tt.ok && (first != tt.first || total != tt.total)) {
			t.Errorf("parseContentRange(%q) = %d, %d, %v", tt.in, first, total, err)
		}
	}
}

// TestErrorText pins the two renderings of an Error: Error names the repo and
// carries the hint; Cause, which the CLI prints with its own "model …:" and
// "Try:", has neither.
func TestErrorText(t *testing.T) {
	e := &Error{Kind: ErrNotFound, Repo: "org/x", Revision: "main", File: "config.json", Status: 404,
		Message: "Repository Not Found", Err: errors.New("cause"), Hint: "check the id"}
	if got, want := e.Cause(), "not found (HTTP 404): Repository Not Found: cause"; got != want {
		t.Errorf("Cause() = %q, want %q", got, want)
	}
	if got, want := e.Error(), "hub: config.json of org/x@main: not found (HTTP 404): Repository Not Found: cause; check the id"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	bare := &Error{Kind: ErrOffline, Repo: "org/x"}
	if got, want := bare.Error(), "hub: org/x: not available offline"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
