package hub

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	for _, tt := range []struct {
		after, date string
		want        time.Duration
	}{
		{"7", "", 7 * time.Second},
		{"-3", "", 0},
		{"Mon, 30 Nov 2026 02:00:30 GMT", "Mon, 30 Nov 2026 02:00:00 GMT", 30 * time.Second},
		{"Mon, 30 Nov 2026 01:59:00 GMT", "Mon, 30 Nov 2026 02:00:00 GMT", 0}, // in the past
		{"Mon, 30 Nov 2026 02:00:30 GMT", "", 0},                              // no reference
		{"soon", "Mon, 30 Nov 2026 02:00:00 GMT", 0},
	} {
		resp := &http.Response{Header: http.Header{}}
		resp.Header.Set("Retry-After", tt.after)
		if tt.date != "" {
			resp.Header.Set("Date", tt.date)
		}
		if got := retryAfter(resp); got != tt.want {
			t.Errorf("Retry-After %q, Date %q: %v, want %v", tt.after, tt.date, got, tt.want)
		}
	}
}
