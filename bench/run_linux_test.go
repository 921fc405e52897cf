//go:build linux

package bench

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// groupMembers lists the live (not zombie) processes of process group pgid,
// from /proc.
func groupMembers(t *testing.T, pgid int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid pgrp …; comm may hold spaces and parentheses.
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		f := strings.Fields(rest)
		if len(f) < 3 || f[0] == "Z" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitGroupGone gives a killed group's processes a moment to die (SIGKILL is
// delivered asynchronously) and returns those still alive.
func waitGroupGone(t *testing.T, pgid int) []int {
	t.Helper()
	var pids []int
	for range 200 {
		if pids = groupMembers(t, pgid); len(pids) == 0 {
			return nil
		}
		time.Sleep(25 * time.Millisecond)
	}
	return pids
}

// waitFile waits for a file the fake probe writes and returns its content.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	for range 400 {
		if b, err := os.ReadFile(path); err == nil {
			return strings.TrimSpace(string(b))
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("the fake probe never wrote %s", path)
	return ""
}

// A SIGTERM (as sent by timeout, Slurm or docker stop) reaches Run as a
// context cancelled with an Interrupted cause: the probe's whole process
// group is interrupted and then killed, the receipt says interrupted by
// SIGTERM, and the probe's temporary directory is gone.
func TestRunInterruptedBySignal(t *testing.T) {
	rec := t.TempDir()
	t.Setenv("FAKEPY_COPY_DIR", rec)
	dir := t.TempDir()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan struct{})
	var r Receipt
	var err error
	go func() {
		defer close(done)
		r, err = Run(ctx, Options{Config: loraConfig(), Python: fakePython(t, "hang"), ReceiptPath: filepath.Join(dir, "r.json"), GracePeriod: 2 * time.Second})
	}()
	pgid, _ := strconv.Atoi(waitFile(t, filepath.Join(rec, "pid")))
	probeDir := waitFile(t, filepath.Join(rec, "dir"))
	if len(groupMembers(t, pgid)) < 2 {
		t.Fatalf("the fake probe's group %d has %v, want the shell and its sleep", pgid, groupMembers(t, pgid))
	}
	cancel(&Interrupted{Signal: "SIGTERM"})
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != StatusInterrupted || r.Signal != "SIGTERM" || !strings.Contains(r.Error, "interrupted by SIGTERM at stage forward") || r.CompletedUpdates != 1 {
		t.Errorf("status %s, signal %q, error %q, completed %d", r.Status, r.Signal, r.Error, r.CompletedUpdates)
	}
	written, rerr := ReadReceipt(filepath.Join(dir, "r.json"))
	if rerr != nil || written.Status != StatusInterrupted || written.Signal != "SIGTERM" {
		t.Errorf("written receipt: status %s, signal %q, %v", written.Status, written.Signal, rerr)
	}
	if pids := waitGroupGone(t, pgid); len(pids) > 0 {
		t.Errorf("processes of the probe's group %d still alive: %v", pgid, pids)
	}
	if _, err := os.Stat(probeDir); !os.IsNotExist(err) {
		t.Errorf("probe directory %s left behind (%v)", probeDir, err)
	}
}
