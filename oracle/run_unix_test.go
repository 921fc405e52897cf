//go:build unix

package oracle

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A run past its timeout is stopped with every process it started.
func TestRunTimeoutKillsGroup(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "child.pid")
	t.Setenv("FAKE_CHILD_PIDFILE", pidfile)
	start := time.Now()
	_, err := Run(context.Background(), Options{Python: fakePython(t, "hang"), ConfigJSON: tinyConfig, Request: request{"lora", 512}, Timeout: 500 * time.Millisecond})
	var e *Error
	if !errors.As(err, &e) || e.Kind != Timeout || !strings.Contains(err.Error(), "did not finish within 500ms") {
		t.Fatalf("Run error = %v, want a timeout", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Run returned after %v", d)
	}
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatalf("the fake did not start its child: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// The child is killed with the group; give the kernel a moment to reap it.
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil && !zombie(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the oracle's child %d outlived the timeout", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// zombie reports whether pid has exited but not been reaped (its parent, the
// killed shell, is gone; init reaps it in its own time).
func zombie(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(rest, "Z")
}
