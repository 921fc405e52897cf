package trace

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"
)

// Scratch is where the analysis spills sorted runs once a sort buffer is
// full, so that its memory stays bounded whatever the size of the trace.
// The package does not touch the file system itself: the caller passes
// temporary files (the CLI does), or MemScratch.
type Scratch interface {
	// Create returns a new, empty scratch file.
	Create() (ScratchFile, error)
}

// ScratchFile is one spilled run: written once from the start, then read
// any number of times, then closed. Close releases it (a temporary file is
// removed), and is called exactly once for every file Create returned,
// also when the analysis fails.
type ScratchFile interface {
	io.Writer
	io.ReaderAt
	io.Closer
}

// MemScratch keeps runs in memory. It bounds nothing; it exists for tests,
// which use it with a tiny BufferBytes to exercise the spilling path.
type MemScratch struct{}

// Create returns an empty in-memory file.
func (MemScratch) Create() (ScratchFile, error) { return &memFile{}, nil }

type memFile struct{ b []byte }

func (m *memFile) Write(p []byte) (int, error) { m.b = append(m.b, p...); return len(p), nil }
func (m *memFile) Close() error                { m.b = nil; return nil }
func (m *memFile) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// codec writes records of one type as fixed-size little-endian bytes.
type codec[T any] struct {
	size int
	put  func(b []byte, v *T)
	get  func(b []byte, v *T)
}

const (
	// maxFanIn bounds how many runs one merge reads at once; more are first
	// merged into longer runs, so the read buffers stay bounded too.
	maxFanIn = 32
	// runIOBuffer is the buffer of each run being written or read.
	runIOBuffer = 32 << 10
	// minRunRecords keeps a tiny BufferBytes from making runs of one
	// record, which would only test the fan-in limit very slowly.
	minRunRecords = 4
)

// sorter is an external merge sort: records are buffered up to limit, each
// full buffer is sorted and written to scratch as a run, and the runs are
// merged when read. Without scratch, or when everything fits, it is an
// in-memory sort.
type sorter[T any] struct {
	cmp     func(a, b T) int
	codec   codec[T]
	scratch Scratch
	limit   int // records held in memory before a run is spilled
	buf     []T
	runs    []run
	n       int64
}

type run struct {
	f ScratchFile
	n int64 // records
}

// newSorter returns a sorter that holds about bufferBytes of records before
// spilling to scratch; with scratch nil it never spills.
func newSorter[T any](c codec[T], cmp func(a, b T) int, scratch Scratch, bufferBytes int) *sorter[T] {
	s := &sorter[T]{cmp: cmp, codec: c, scratch: scratch, limit: int(^uint(0) >> 1)}
	if scratch != nil {
		s.limit = max(bufferBytes/c.size, minRunRecords)
	}
	return s
}

// adopt takes ownership of an in-memory slice as the sorter's content.
func (s *sorter[T]) adopt(v []T) {
	s.buf = v
	s.n = int64(len(v))
}

func (s *sorter[T]) add(v T) error {
	if len(s.buf) == cap(s.buf) {
		if len(s.buf) >= s.limit {
			if err := s.spill(); err != nil {
				return err
			}
		} else {
			// Grow by doubling, but never past the limit: append's own
			// growth would overshoot the budget by up to 2×.
			nb := make([]T, len(s.buf), min(max(2*cap(s.buf), 256), s.limit))
			copy(nb, s.buf)
			s.buf = nb
		}
	}
	s.buf = append(s.buf, v)
	s.n++
	return nil
}

// spill sorts the buffer and writes it as a run.
func (s *sorter[T]) spill() error {
	slices.SortFunc(s.buf, s.cmp)
	r, err := s.writeRun(slices.Values(s.buf))
	if err != nil {
		return err
	}
	s.runs = append(s.runs, r)
	s.buf = s.buf[:0]
	return nil
}

// writeRun writes recs to a new scratch file. On error the file is closed
// and not returned, so that each file is closed exactly once.
func (s *sorter[T]) writeRun(recs iter.Seq[T]) (run, error) {
	f, err := s.scratch.Create()
	if err != nil {
		return run{}, fmt.Errorf("create scratch run: %w", err)
	}
	out := run{f: f}
	w := bufio.NewWriterSize(f, runIOBuffer)
	rec := make([]byte, s.codec.size)
	var v T // declared once: put takes its address, which moves it to the heap
	for v = range recs {
		s.codec.put(rec, &v)
		if _, err = w.Write(rec); err != nil {
			break
		}
		out.n++
	}
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		f.Close()
		return run{}, fmt.Errorf("write scratch run: %w", err)
	}
	return out, nil
}

// finish sorts what is left and returns the sorted sequence. Runs are
// merged down to at most maxFanIn first. The sorter must not be added to
// afterwards; close the result to release its runs.
func (s *sorter[T]) finish() (*sorted[T], error) {
	if len(s.runs) == 0 {
		slices.SortFunc(s.buf, s.cmp)
		out := &sorted[T]{mem: s.buf, s: s}
		s.buf = nil
		return out, nil
	}
	if len(s.buf) > 0 {
		if err := s.spill(); err != nil {
			return nil, err
		}
	}
	s.buf = nil // the budget goes to whatever runs next
	for len(s.runs) > maxFanIn {
		if err := s.mergeRuns(maxFanIn); err != nil {
			return nil, err
		}
	}
	out := &sorted[T]{runs: s.runs, s: s}
	s.runs = nil
	return out, nil
}

// mergeRuns replaces the first k runs with one run holding their merge.
func (s *sorter[T]) mergeRuns(k int) error {
	in := &sorted[T]{runs: s.runs[:k], s: s}
	it := in.iter()
	out, err := s.writeRun(it.all())
	if err != nil {
		return err
	}
	if it.err != nil {
		out.f.Close()
		return fmt.Errorf("merge scratch runs: %w", it.err)
	}
	// The merged run replaces its inputs before they are closed, so that
	// whatever happens each file is closed once.
	s.runs = append([]run{out}, s.runs[k:]...)
	return in.close()
}

// close releases runs not yet handed to a sorted sequence (on error paths).
func (s *sorter[T]) close() error {
	err := closeRuns(s.runs)
	s.runs, s.buf = nil, nil
	return err
}

func closeRuns(runs []run) error {
	var errs []error
	for _, r := range runs {
		if err := r.f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close scratch run: %w", err))
		}
	}
	return errors.Join(errs...)
}

// sorted is a sorted sequence: in memory, or spilled runs merged on read.
// It can be read any number of times.
type sorted[T any] struct {
	mem  []T
	runs []run
	s    *sorter[T]
}

func (q *sorted[T]) close() error {
	err := closeRuns(q.runs)
	q.runs, q.mem = nil, nil
	return err
}

// iter reads the sequence from the start.
func (q *sorted[T]) iter() *iterator[T] {
	it := &iterator[T]{mem: q.mem, cmp: q.s.cmp, codec: q.s.codec}
	for _, r := range q.runs {
		rr := &runReader{r: bufio.NewReaderSize(io.NewSectionReader(r.f, 0, r.n*int64(q.s.codec.size)), runIOBuffer),
			left: r.n, rec: make([]byte, q.s.codec.size)}
		it.readers = append(it.readers, rr)
	}
	it.heads = make([]T, len(it.readers))
	for i := range it.readers {
		if it.load(i) {
			it.heap = append(it.heap, i)
		}
	}
	for i := len(it.heap)/2 - 1; i >= 0; i-- {
		it.down(i)
	}
	return it
}

type runReader struct {
	r    *bufio.Reader
	left int64
	rec  []byte
}

// iterator yields a sorted sequence; err is set when reading a run failed,
// and the sequence then ends early.
type iterator[T any] struct {
	mem     []T
	readers []*runReader
	heads   []T
	heap    []int // reader indices by head
	cmp     func(a, b T) int
	codec   codec[T]
	err     error
}

// load reads reader i's next record into heads[i]; false at its end.
func (it *iterator[T]) load(i int) bool {
	rr := it.readers[i]
	if rr.left == 0 || it.err != nil {
		return false
	}
	if _, err := io.ReadFull(rr.r, rr.rec); err != nil {
		it.err = fmt.Errorf("read scratch run: %w", err)
		return false
	}
	rr.left--
	it.codec.get(rr.rec, &it.heads[i])
	return true
}

func (it *iterator[T]) less(a, b int) bool {
	x, y := it.heap[a], it.heap[b]
	if c := it.cmp(it.heads[x], it.heads[y]); c != 0 {
		return c < 0
	}
	return x < y // ties in run order, so a read is deterministic
}

func (it *iterator[T]) down(i int) {
	n := len(it.heap)
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && it.less(l, m) {
			m = l
		}
		if r < n && it.less(r, m) {
			m = r
		}
		if m == i {
			return
		}
		it.heap[i], it.heap[m] = it.heap[m], it.heap[i]
		i = m
	}
}

// next returns the next record; false at the end or on error (see err).
func (it *iterator[T]) next(v *T) bool {
	if it.readers == nil {
		if len(it.mem) == 0 {
			return false
		}
		*v = it.mem[0]
		it.mem = it.mem[1:]
		return true
	}
	if len(it.heap) == 0 || it.err != nil {
		return false
	}
	i := it.heap[0]
	*v = it.heads[i]
	if !it.load(i) {
		if it.err != nil {
			return false
		}
		n := len(it.heap) - 1
		it.heap[0] = it.heap[n]
		it.heap = it.heap[:n]
	}
	it.down(0)
	return true
}

// all ranges over the remaining records; check err afterwards.
func (it *iterator[T]) all() iter.Seq[T] {
	return func(yield func(T) bool) {
		var v T
		for it.next(&v) {
			if !yield(v) {
				return
			}
		}
	}
}

// peeker wraps an iterator with one record of lookahead.
type peeker[T any] struct {
	it  *iterator[T]
	cur T
	ok  bool
}

func newPeeker[T any](it *iterator[T]) *peeker[T] {
	p := &peeker[T]{it: it}
	p.ok = it.next(&p.cur)
	return p
}

func (p *peeker[T]) advance() { p.ok = p.it.next(&p.cur) }
