//go:build linux

package cli

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/canifinetune/canifinetune/bench"
)

// TestBenchSIGTERM sends SIGTERM, as timeout, Slurm and docker stop do, to a
// real bench process whose probe hangs: bench must interrupt the probe's
// process group and kill it, write a receipt that says interrupted by
// SIGTERM, remove the probe's temporary directory and exit 143.
func TestBenchSIGTERM(t *testing.T) {
	hang, err := filepath.Abs(filepath.Join("..", "..", "bench", "testdata", "fakepy", "hang"))
	if err != nil {
		t.Fatal(err)
	}
	work, rec, tmp := t.TempDir(), t.TempDir(), t.TempDir()
	receipt := filepath.Join(work, "r.json")
	cmd := exec.Command(os.Args[0], "bench", "Qwen/Qwen2.5-0.5B", "--random-init", "--receipt", receipt, "--python", hang)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "CANIFINETUNE_TEST_MAIN=1", "FAKEPY_COPY_DIR="+rec, "TMPDIR="+tmp,
		"CANIFINETUNE_TOOL_PATH="+t.TempDir(), "HF_HOME="+t.TempDir(), "HF_HUB_OFFLINE=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pgid, _ := strconv.Atoi(waitFor(t, filepath.Join(rec, "pid")))
	probeDir := waitFor(t, filepath.Join(rec, "dir"))
	if !strings.HasPrefix(probeDir, tmp) {
		t.Fatalf("probe ran in %s, want a directory under TMPDIR %s", probeDir, tmp)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != ExitTerminated {
		t.Errorf("bench exited with %v, want exit %d\nstderr: %s", err, ExitTerminated, stderr.String())
	}
	if !strings.Contains(stderr.String(), "interrupted by SIGTERM at stage forward") {
		t.Errorf("stderr = %q, want it to say interrupted by SIGTERM", stderr.String())
	}
	r, err := bench.ReadReceipt(receipt)
	if err != nil {
		t.Fatalf("no receipt after SIGTERM: %v", err)
	}
	if r.Status != bench.StatusInterrupted || r.Signal != "SIGTERM" || r.CompletedUpdates != 1 {
		t.Errorf("receipt: status %s, signal %q, completed %d, error %q", r.Status, r.Signal, r.CompletedUpdates, r.Error)
	}
	if pids := liveGroup(t, pgid); len(pids) > 0 {
		t.Errorf("the probe's process group %d outlived bench: %v", pgid, pids)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("left in TMPDIR: %v", ents)
	}
}

// waitFor waits for a file the fake probe writes and returns its content.
func waitFor(t *testing.T, path string) string {
	t.Helper()
	for range 800 {
		if b, err := os.ReadFile(path); err == nil {
			return strings.TrimSpace(string(b))
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("the fake probe never wrote %s", path)
	return ""
}

// liveGroup returns the live (not zombie) processes of group pgid, after
// giving a killed group a moment to die (SIGKILL is delivered asynchronously).
func liveGroup(t *testing.T, pgid int) []int {
	t.Helper()
	var pids []int
	for range 200 {
		pids = pids[:0]
		ents, err := os.ReadDir("/proc")
		if err != nil {
			t.Skipf("no /proc: %v", err)
		}
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
			if err != nil {
				continue
			}
			f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])) // state ppid pgrp …
			if len(f) >= 3 && f[0] != "Z" {
				if g, _ := strconv.Atoi(f[2]); g == pgid {
					pids = append(pids, pid)
				}
			}
		}
		if len(pids) == 0 {
			return nil
		}
		time.Sleep(25 * time.Millisecond)
	}
	return pids
}
