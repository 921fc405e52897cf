package cli

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/canifinetune/canifinetune/trace"
)

const scratchTestTrace = "../../trace/testdata/hta_ns_resolution_rank0_5steps.json.gz"

// emptyDir fails the test unless dir holds nothing: the scratch directory
// and its runs must be gone however the analysis ended.
func emptyDir(t *testing.T, dir, when string) {
	t.Helper()
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("%s: %d entries left in the temporary directory, first %s", when, len(left), left[0].Name())
	}
}

// TestTraceScratchSpillsAndCleansUp: with tiny buffers the CLI's file
// scratch gives the in-memory report, and leaves nothing behind.
func TestTraceScratchSpillsAndCleansUp(t *testing.T) {
	root := t.TempDir()
	got, err := analyzeTraceFile(context.Background(), scratchTestTrace, nil, trace.Options{BufferBytes: 512}, root)
	if err != nil {
		t.Fatal(err)
	}
	emptyDir(t, root, "after a run")
	f, err := os.Open(scratchTestTrace)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	want, err := trace.Analyze(zr, trace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want.Source = scratchTestTrace
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("report through file scratch differs (-memory +files):\n%s", diff)
	}

	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "dur": 2, "pid": 0, "tid": 7}, {"ph": nope`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := analyzeTraceFile(context.Background(), bad, nil, trace.Options{BufferBytes: 512}, root); err == nil {
		t.Error("malformed trace: no error")
	}
	emptyDir(t, root, "after an error")
}

// countdownCtx is a context that reports itself cancelled from its n-th
// Err call on: an interrupt arriving at a chosen point of the analysis.
type countdownCtx struct {
	context.Context
	n atomic.Int64
}

func (c *countdownCtx) Err() error {
	if c.n.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

func (c *countdownCtx) Done() <-chan struct{} { return nil }

func (c *countdownCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

// TestTraceInterruptCleansUp interrupts the analysis while it reads and
// while it spills or merges runs: it fails with errInterrupted and removes
// every run and the directory.
func TestTraceInterruptCleansUp(t *testing.T) {
	root := t.TempDir()
	// Count the checks a whole run makes, then interrupt at points across it.
	probe := &countdownCtx{Context: context.Background()}
	probe.n.Store(1 << 40)
	if _, err := analyzeTraceFile(probe, scratchTestTrace, nil, trace.Options{BufferBytes: 512}, root); err != nil {
		t.Fatal(err)
	}
	checks := 1<<40 - probe.n.Load()
	if checks < 100 {
		t.Fatalf("only %d interrupt checks in a run with hundreds of runs", checks)
	}
	for _, at := range []int64{0, 1, checks / 10, checks / 2, checks * 9 / 10, checks - 1} {
		ctx := &countdownCtx{Context: context.Background()}
		ctx.n.Store(at)
		_, err := analyzeTraceFile(ctx, scratchTestTrace, nil, trace.Options{BufferBytes: 512}, root)
		if !errors.Is(err, errInterrupted) {
			t.Errorf("interrupt at check %d of %d: err = %v, want errInterrupted", at, checks, err)
		}
		emptyDir(t, root, "after an interrupt")
	}
}

// TestTraceScratchMadeOnlyToSpill: a trace that fits in the sort buffers
// needs no scratch directory, so a temporary root that does not exist is
// no obstacle; one that spills says what it could not make.
func TestTraceScratchMadeOnlyToSpill(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "does-not-exist")
	if _, err := analyzeTraceFile(context.Background(), scratchTestTrace, nil, trace.Options{}, missing); err != nil {
		t.Errorf("trace that fits in memory, no temporary directory: %v", err)
	}
	_, err := analyzeTraceFile(context.Background(), scratchTestTrace, nil, trace.Options{BufferBytes: 512}, missing)
	if err == nil || !strings.Contains(err.Error(), "trace scratch directory") {
		t.Errorf("trace that spills, no temporary directory: err = %v, want a scratch directory error", err)
	}
	if _, statErr := os.Stat(missing); !errors.Is(statErr, os.ErrNotExist) {
		t.Errorf("%s was made: %v", missing, statErr)
	}
}

// TestTraceStdin: "-" reads standard input, gzipped or not, and the report
// names it.
func TestTraceStdin(t *testing.T) {
	raw, err := os.ReadFile(scratchTestTrace)
	if err != nil {
		t.Fatal(err)
	}
	want, err := analyzeTraceFile(context.Background(), scratchTestTrace, nil, trace.Options{}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	want.Source = stdinName
	got, err := analyzeTraceFile(context.Background(), "-", bytes.NewReader(raw), trace.Options{}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("gzipped trace on stdin differs from the file (-file +stdin):\n%s", diff)
	}
}
