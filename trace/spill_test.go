package trace

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// countingScratch is MemScratch that counts files and can fail on demand.
type countingScratch struct {
	created, open int
	failCreateAt  int // fail the n-th Create (1-based); 0 never
	failWriteAt   int // fail the n-th file's writes; 0 never
}

var errScratch = errors.New("scratch is full")

func (s *countingScratch) Create() (ScratchFile, error) {
	if s.failCreateAt > 0 && s.created+1 == s.failCreateAt {
		return nil, errScratch
	}
	s.created++
	s.open++
	return &countingFile{s: s, fail: s.created == s.failWriteAt}, nil
}

type countingFile struct {
	memFile
	s      *countingScratch
	fail   bool
	closed bool
}

func (f *countingFile) Write(p []byte) (int, error) {
	if f.fail {
		return 0, errScratch
	}
	return f.memFile.Write(p)
}

func (f *countingFile) Close() error {
	if f.closed {
		return errors.New("closed twice")
	}
	f.closed = true
	f.s.open--
	return f.memFile.Close()
}

// analyzeBoth reports on a trace in memory and through scratch with a
// buffer of bufferBytes, and fails unless the reports and the gap
// sequences are identical and every scratch file was released.
func analyzeBoth(t *testing.T, in []byte, bufferBytes int, opts Options) (*Report, *countingScratch) {
	t.Helper()
	var memGaps, spillGaps []Gap
	opts.onGap = func(dev int, g Gap) { memGaps = append(memGaps, g) }
	want, err := Analyze(bytes.NewReader(in), opts)
	if err != nil {
		t.Fatal(err)
	}
	sc := &countingScratch{}
	opts.Scratch, opts.BufferBytes = sc, bufferBytes
	opts.onGap = func(dev int, g Gap) { spillGaps = append(spillGaps, g) }
	got, err := Analyze(bytes.NewReader(in), opts)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("spilled report differs (-memory +spilled):\n%s", diff)
	}
	if diff := cmp.Diff(memGaps, spillGaps); diff != "" {
		t.Fatalf("spilled gaps differ (-memory +spilled):\n%s", diff)
	}
	if sc.open != 0 {
		t.Errorf("%d of %d scratch files left open", sc.open, sc.created)
	}
	return got, sc
}

// TestSpillMatchesMemoryRealTraces forces the real traces through scratch
// with buffers of a few records: hundreds of runs, merged in several
// passes (more than maxFanIn at once), must give the same report.
func TestSpillMatchesMemoryRealTraces(t *testing.T) {
	for _, rt := range realTraces {
		t.Run(rt.file, func(t *testing.T) {
			in := gunzipTestdata(t, rt.file)
			for _, bb := range []int{1, 4 << 10} {
				r, sc := analyzeBoth(t, in, bb, Options{})
				// The ops alone make ops/4 runs at the smallest buffer.
				if bb == 1 && sc.created < rt.ops/minRunRecords {
					t.Errorf("buffer %d: %d scratch files, want ≥ %d: the spilling path was not taken", bb, sc.created, rt.ops/minRunRecords)
				}
				if bb > 1 && sc.created == 0 {
					t.Errorf("buffer %d: nothing spilled", bb)
				}
				checkInvariants(t, r.Devices[0])
			}
		})
	}
}

// TestSpillMatchesMemoryRandom compares the two paths on random traces
// with what the real traces lack: several devices, nested labels on
// streams and threads, shared and missing correlation ids, duplicate
// launches, zero and negative durations, ops out of file order.
func TestSpillMatchesMemoryRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for iter := range 200 {
		events := randomTrace(rng)
		in := []byte(traceJSON(events...))
		r, _ := analyzeBoth(t, in, 1+rng.IntN(400), Options{AllSteps: iter%2 == 0})
		for _, d := range r.Devices {
			checkInvariants(t, d)
		}
		if t.Failed() {
			t.Fatalf("iter %d", iter)
		}
	}
}

func randomTrace(rng *rand.Rand) []string {
	names := []string{"sm80_gemm", "vectorized_elementwise", "ncclKernel_AllReduce", "flash_fwd", "softmax", "k"}
	var ev []string
	nSteps := rng.IntN(5)
	for s := range nSteps {
		ev = append(ev, fmt.Sprintf(`{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#%d", "pid": 10, "tid": 11, "ts": %d, "dur": %d}`, s+1, s*200, 200))
	}
	for range rng.IntN(30) {
		tid := 11 + rng.IntN(2)
		ev = append(ev, fmt.Sprintf(`{"ph": "X", "cat": "user_annotation", "name": "h%d", "pid": 10, "tid": %d, "ts": %d, "dur": %d}`, rng.IntN(6), tid, rng.IntN(900), rng.IntN(300)))
	}
	for range rng.IntN(30) {
		ev = append(ev, fmt.Sprintf(`{"ph": "X", "cat": "gpu_user_annotation", "name": "g%d", "pid": %d, "tid": %d, "ts": %d, "dur": %d}`, rng.IntN(6), rng.IntN(2), 7+rng.IntN(3), rng.IntN(900), rng.IntN(300)))
	}
	n := 1 + rng.IntN(300)
	for i := range n {
		corr := 1 + i
		if rng.IntN(10) == 0 {
			corr = 1 + rng.IntN(n) // shared with another op
		}
		if rng.IntN(20) == 0 {
			corr = 0 // none
		}
		start := rng.IntN(1000)
		dur := rng.IntN(40)
		if rng.IntN(30) == 0 {
			dur = -dur
		}
		dev, stream := rng.IntN(2), 7+rng.IntN(3)
		cat := "kernel"
		name := names[rng.IntN(len(names))]
		if rng.IntN(8) == 0 {
			cat, name = "gpu_memcpy", "Memcpy DtoD"
		}
		ev = append(ev, fmt.Sprintf(`{"ph": "X", "cat": %q, "name": %q, "pid": %d, "tid": %d, "ts": %d, "dur": %d, "args": {"device": %d, "stream": %d, "correlation": %d}}`,
			cat, name, dev, stream, start, dur, dev, stream, corr))
		if corr > 0 && rng.IntN(15) != 0 { // some launches are missing
			for range 1 + rng.IntN(2)*rng.IntN(2) { // a few twice
				ev = append(ev, fmt.Sprintf(`{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": %d, "ts": %d, "dur": %d, "args": {"correlation": %d}}`,
					11+rng.IntN(2), start-rng.IntN(30), rng.IntN(6), corr))
			}
		}
	}
	rng.Shuffle(len(ev), func(i, j int) { ev[i], ev[j] = ev[j], ev[i] })
	return ev
}

// TestSpillErrors: a scratch that fails surfaces as an error that says so,
// and every file that was created is released.
func TestSpillErrors(t *testing.T) {
	in := gunzipTestdata(t, "hta_sampled_rank0_4streams_2steps.json.gz")
	total := &countingScratch{}
	if _, err := Analyze(bytes.NewReader(in), Options{Scratch: total, BufferBytes: 64}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 40 {
		// Fail somewhere in parsing, joining, the sweep or the label pass.
		k := 1 + rng.IntN(total.created)
		for _, sc := range []*countingScratch{{failCreateAt: k}, {failWriteAt: k}} {
			_, err := Analyze(bytes.NewReader(in), Options{Scratch: sc, BufferBytes: 64})
			if !errors.Is(err, errScratch) {
				t.Fatalf("scratch failing at file %d of %d: err = %v, want errScratch", k, total.created, err)
			}
			if !strings.Contains(err.Error(), "scratch") {
				t.Errorf("error %q does not say what failed", err)
			}
			if sc.open != 0 {
				t.Errorf("scratch failing at file %d: %d files left open", k, sc.open)
			}
		}
	}
}

// TestSorter checks the external sort alone: the output is the sorted
// input whatever the buffer, runs beyond maxFanIn are merged before the
// read, and it can be read twice.
func TestSorter(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 3, 4, 5, 100, 5000} {
		for _, bb := range []int{1, 12 * 7, 12 * 1000} {
			sc := &countingScratch{}
			s := newSorter(gapCodec, gapByLen, sc, bb)
			var want []int64
			for i := range n {
				g := gapRec{Len: rng.Int64N(50) - 10, Step: int32(i)}
				want = append(want, g.Len)
				if err := s.add(g); err != nil {
					t.Fatal(err)
				}
			}
			q, err := s.finish()
			if err != nil {
				t.Fatal(err)
			}
			if len(q.runs) > maxFanIn {
				t.Errorf("n %d buffer %d: %d runs to merge at once, want ≤ %d", n, bb, len(q.runs), maxFanIn)
			}
			slices.Sort(want)
			for pass := range 2 {
				var got []int64
				it := q.iter()
				for g := range it.all() {
					got = append(got, g.Len)
				}
				if it.err != nil {
					t.Fatal(it.err)
				}
				if !slices.Equal(want, got) {
					t.Fatalf("n %d buffer %d pass %d: not the sorted input", n, bb, pass)
				}
			}
			if err := q.close(); err != nil {
				t.Fatal(err)
			}
			if sc.open != 0 {
				t.Errorf("n %d buffer %d: %d files left open", n, bb, sc.open)
			}
		}
	}
}

// TestNamesCapped: a trace with more distinct kernel names than the name
// table holds merges the rest into one row per category, and every
// exclusive figure still adds up.
func TestNamesCapped(t *testing.T) {
	extra := 150
	n := maxNames + extra
	var ev []string
	for i := range n {
		name := fmt.Sprintf("sm80_gemm_%d", i)
		if i%2 == 1 {
			name = fmt.Sprintf("relu_%d", i)
		}
		ev = append(ev, kernel(name, 7, fmt.Sprint(2*i+2), "1", i+1))
	}
	r, _ := analyzeBoth(t, []byte(traceJSON(ev...)), 64<<10, Options{})
	d := r.Devices[0]
	checkInvariants(t, d)
	if diff := cmp.Diff(map[string]int64{"gemm": int64(n+1) / 2 * 1000, "elementwise": int64(n/2) * 1000}, catExcl(d)); diff != "" {
		t.Errorf("category exclusive (-want +got):\n%s", diff)
	}
	merged := map[string]int{}
	for _, k := range d.Kernels {
		if strings.HasPrefix(k.Name, OtherNames) {
			merged[k.Name+" "+k.Category] = k.Ops
		}
	}
	want := map[string]int{"(other names: gemm) gemm": extra / 2, "(other names: elementwise) elementwise": extra / 2}
	if diff := cmp.Diff(want, merged); diff != "" {
		t.Errorf("merged rows [name category: ops] (-want +got):\n%s", diff)
	}
	if len(d.Kernels) != maxNames+2 {
		t.Errorf("kernel rows = %d, want %d", len(d.Kernels), maxNames+2)
	}
	var flagged int64
	for _, f := range r.Flags {
		if f.Code == "names_merged" {
			flagged = f.Count
		}
	}
	if flagged != int64(extra) {
		t.Errorf("names_merged count = %d, want %d", flagged, extra)
	}
}

// TestReportTwice: Report sorts the parsed slices in place but leaves
// them, so a second call gives the same report.
func TestReportTwice(t *testing.T) {
	tr := openTrace(t, "hta_nccl_data_2streams_3steps.json.gz")
	first := tr.Report(Options{})
	if diff := cmp.Diff(first, tr.Report(Options{})); diff != "" {
		t.Errorf("second Report differs (-first +second):\n%s", diff)
	}
}
