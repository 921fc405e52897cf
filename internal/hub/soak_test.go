package hub

import (
	"context"
	"errors"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// soakRuns is how many runs share one cache at once: as many as a job
// array or a sweep script starting on one node might.
const soakRuns = 50

// TestSoakConcurrentRuns: soakRuns clients (as separate processes would be)
// read one model through the fake Hub into one cache at the same time,
// while the Hub and its CDN fail at random (5xx answers, bodies cut short).
// Every run either answers exactly what the Hub holds or fails with
// ErrUnavailable; afterwards an offline run answers the same from the
// cache, and no temporary file is left in it. Loopback only, bounded in
// runs, retries and time.
func TestSoakConcurrentRuns(t *testing.T) {
	f := newFakeHub(t)
	f.repos["org/two"] = twoShardRepo()
	rng := rand.New(rand.NewPCG(11, 2026))
	var injected int
	f.inject = func(host string) fault { // called under f.mu
		switch p := rng.IntN(100); {
		case p < 12:
			injected++
			return fault{status: []int{500, 502, 503}[rng.IntN(3)]}
		case p < 20:
			injected++
			return fault{truncate: true}
		}
		return fault{}
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	models := make([]*Model, soakRuns)
	errs := make([]error, soakRuns)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range soakRuns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, _ := f.client(dir)
			c.RequestTimeout = 10 * time.Second
			c.Deadline = 30 * time.Second
			<-start
			models[i], errs[i] = c.Model(ctx, "org/two", "main")
		}()
	}
	close(start)
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("the runs did not finish within a minute")
	}

	var ok []*Model
	for i, err := range errs {
		switch {
		case err == nil:
			ok = append(ok, models[i])
		case !errors.Is(err, ErrUnavailable):
			// Only the injected failures may fail a run: anything else (a
			// malformed answer, a cache conflict) is a bug under load.
			t.Errorf("run %d: %v; want success or ErrUnavailable", i, err)
		}
	}
	f.mu.Lock()
	faults := injected
	f.mu.Unlock()
	t.Logf("%d runs: %d succeeded, %d injected faults, %d requests", soakRuns, len(ok), faults, len(f.seen()))
	if len(ok) == 0 || faults == 0 {
		t.Fatalf("%d successes, %d injected faults: the soak exercised nothing", len(ok), faults)
	}

	// What every successful run saw, and what the cache now answers, is
	// the repo's content; only where it came from may differ.
	type answer struct {
		Commit, Config string
		Tensors        any
		TotalSize      int64
		Shards         []string
	}
	of := func(m *Model) answer {
		return answer{m.Commit, string(m.ConfigJSON), m.Tensors, m.TotalSizeFromIndex, m.Shards}
	}
	want := answer{commitA, string(testConfig), twoShardCounts, 2*shardData + 2048,
		[]string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}}
	for i, m := range ok {
		if diff := cmp.Diff(want, of(m)); diff != "" {
			t.Errorf("successful run %d (-want +got):\n%s", i, diff)
		}
		for _, w := range m.Warnings {
			if strings.Contains(w, "could not write the cache") {
				t.Errorf("successful run %d: %s", i, w)
			}
		}
	}
	f.inject = nil
	off, _ := f.client(dir)
	off.Offline = true
	before := len(f.seen())
	m, err := off.Model(context.Background(), "org/two", "main")
	if err != nil {
		t.Fatalf("offline after the soak: %v", err)
	}
	if diff := cmp.Diff(want, of(m)); diff != "" || !m.FromCache || len(m.Warnings) > 0 {
		t.Errorf("offline after the soak: FromCache %v, warnings %q, (-want +got):\n%s", m.FromCache, m.Warnings, diff)
	}
	if n := len(f.seen()) - before; n != 0 {
		t.Errorf("offline run made %d requests", n)
	}

	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && (isTempName(d.Name()) || strings.Contains(d.Name(), ".tmp")) {
			t.Errorf("temporary file left in the cache: %s", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
