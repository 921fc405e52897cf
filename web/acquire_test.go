package web

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestAcquire: a free slot is taken and given back; with every slot held,
// a cancelled request gets a 503 naming what it waited for.
func TestAcquire(t *testing.T) {
	sem := make(chan struct{}, 1)
	r := httptest.NewRequest(http.MethodGet, "/api/plan", nil)
	release, pr := acquire(r, sem, "another plan search")
	if pr != nil || len(sem) != 1 {
		t.Fatalf("free slot: problem %v, %d held", pr, len(sem))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, pr := acquire(r.WithContext(ctx), sem, "another plan search"); pr == nil || pr.Status != http.StatusServiceUnavailable || !strings.Contains(pr.Message, "another plan search") {
		t.Errorf("all slots held, request cancelled: %+v, want a 503 naming the wait", pr)
	}
	release()
	if len(sem) != 0 {
		t.Errorf("after release %d slots held, want 0", len(sem))
	}
}
