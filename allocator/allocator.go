package allocator

import (
	"errors"
	"fmt"
	"sort"
)

// The caching allocator's size constants (CUDACachingAllocator.cpp).
const (
	// MinBlockSize: every request is rounded up to a multiple of 512 B.
	MinBlockSize int64 = 512
	// SmallSize is the largest request the small pool serves (1 MiB).
	SmallSize int64 = 1 << 20
	// SmallBuffer is the segment the small pool allocates (2 MiB), and the
	// page size of a small expandable segment.
	SmallBuffer int64 = 2 << 20
	// MinLargeAlloc: large requests below 10 MiB are served from a
	// LargeBuffer segment.
	MinLargeAlloc int64 = 10 << 20
	// LargeBuffer is the segment for large requests under 10 MiB (20 MiB),
	// and the page size of a large expandable segment.
	LargeBuffer int64 = 20 << 20
	// RoundLarge: larger requests get a segment rounded up to 2 MiB.
	RoundLarge int64 = 2 << 20
)

// ErrOutOfMemory is returned by Malloc when the device cannot hold a new
// segment even after every whole cached segment was released.
var ErrOutOfMemory = errors.New("allocator: out of memory")

// Config is the allocator's PYTORCH_CUDA_ALLOC_CONF, as far as it is modelled.
type Config struct {
	// MaxSplitSize is max_split_size_mb in bytes; 0 means unlimited (the
	// default). Cached blocks this large or larger are never split, and a
	// request below it never takes one.
	MaxSplitSize int64
	// ExpandableSegments is expandable_segments:True.
	ExpandableSegments bool
	// Capacity is the device memory the allocator may reserve; 0: unlimited.
	Capacity int64
}

// Handle names one live allocation.
type Handle int

// Stats are the allocator's levels, in bytes, as torch.cuda.memory_stats
// names them.
type Stats struct {
	// Allocated is allocated_bytes.all.current: the rounded sizes of live blocks.
	Allocated, PeakAllocated int64
	// Requested is requested_bytes.all.current: the sizes the caller asked for.
	Requested int64
	// Reserved is reserved_bytes.all.current: every segment's size.
	Reserved, PeakReserved int64
	// Segments is the number of segments (cudaMalloc calls outstanding).
	Segments int
	// Releases counts the times a full device made the allocator release
	// its cached segments and retry.
	Releases int
}

// Fragmentation is reserved memory no live block uses (cached free blocks).
func (s Stats) Fragmentation() int64 { return s.Reserved - s.Allocated }

type segment struct {
	id     int
	small  bool
	blocks []*block // by address
	size   int64
}

type block struct {
	seg       *segment
	off, size int64
	requested int64
	allocated bool
}

// Allocator replays allocations and frees the way PyTorch's caching
// allocator serves them. The zero value is not usable; call New.
type Allocator struct {
	cfg      Config
	free     [2][]*block // [0] large pool, [1] small pool
	segments []*segment
	expand   [2]*segment // expandable segment per pool
	live     map[Handle]*block
	next     Handle
	nextSeg  int
	stats    Stats
}

// New returns an empty allocator.
func New(cfg Config) *Allocator {
	return &Allocator{cfg: cfg, live: map[Handle]*block{}}
}

// RoundSize is round_size: a request rounded up to a multiple of 512 B
// (roundup_power2_divisions is not modelled).
func RoundSize(n int64) int64 {
	if n < MinBlockSize {
		return MinBlockSize
	}
	return (n + MinBlockSize - 1) / MinBlockSize * MinBlockSize
}

// AllocationSize is get_allocation_size: the segment a rounded request that
// no cached block can serve makes the allocator cudaMalloc.
func AllocationSize(size int64) int64 {
	switch {
	case size <= SmallSize:
		return SmallBuffer
	case size < MinLargeAlloc:
		return LargeBuffer
	default:
		return (size + RoundLarge - 1) / RoundLarge * RoundLarge
	}
}

// Stats returns the current levels and peaks.
func (a *Allocator) Stats() Stats { return a.stats }

// ResetPeaks sets the peaks to the current levels (torch.cuda.reset_peak_memory_stats).
func (a *Allocator) ResetPeaks() {
	a.stats.PeakAllocated = a.stats.Allocated
	a.stats.PeakReserved = a.stats.Reserved
}

func poolIndex(small bool) int {
	if small {
		return 1
	}
	return 0
}

// Malloc allocates n bytes and returns the allocation's handle.
func (a *Allocator) Malloc(n int64) (Handle, error) {
	if n < 0 {
		return 0, fmt.Errorf("allocator: negative size %d", n)
	}
	size := RoundSize(n)
	small := size <= SmallSize
	b := a.bestFit(small, size)
	if b == nil {
		var err error
		if a.cfg.ExpandableSegments {
			b, err = a.grow(small, size)
		} else {
			b, err = a.newSegment(small, size)
		}
		if err != nil {
			return 0, fmt.Errorf("%w: %d bytes requested, %d reserved, %d allocated", err, n, a.stats.Reserved, a.stats.Allocated)
		}
	}
	a.removeFree(b)
	if a.shouldSplit(b, size) {
		rest := &block{seg: b.seg, off: b.off + size, size: b.size - size}
		b.size = size
		a.insertAfter(b, rest)
		a.addFree(rest)
	}
	b.allocated = true
	b.requested = n
	a.next++
	a.live[a.next] = b
	a.stats.Allocated += b.size
	a.stats.Requested += n
	a.stats.PeakAllocated = max(a.stats.PeakAllocated, a.stats.Allocated)
	return a.next, nil
}

// Free returns an allocation's block to its pool, merged with free
// neighbours in the same segment.
func (a *Allocator) Free(h Handle) error {
	b, ok := a.live[h]
	if !ok {
		return fmt.Errorf("allocator: free of unknown handle %d", h)
	}
	delete(a.live, h)
	b.allocated = false
	a.stats.Allocated -= b.size
	a.stats.Requested -= b.requested
	b.requested = 0
	blocks := b.seg.blocks
	i := indexOf(blocks, b)
	if i+1 < len(blocks) && !blocks[i+1].allocated {
		nb := blocks[i+1]
		a.removeFree(nb)
		b.size += nb.size
		b.seg.blocks = append(blocks[:i+1], blocks[i+2:]...)
		blocks = b.seg.blocks
	}
	if i > 0 && !blocks[i-1].allocated {
		pb := blocks[i-1]
		a.removeFree(pb)
		pb.size += b.size
		b.seg.blocks = append(blocks[:i], blocks[i+1:]...)
		b = pb
	}
	a.addFree(b)
	return nil
}

// bestFit is get_free_block: the smallest cached block that holds size
// (lowest segment and address on ties), or nil. The free blocks of a pool
// are kept ordered that way, as the allocator's std::set is.
func (a *Allocator) bestFit(small bool, size int64) *block {
	free := a.free[poolIndex(small)]
	i := sort.Search(len(free), func(i int) bool { return free[i].size >= size })
	if i == len(free) {
		return nil
	}
	best := free[i]
	if m := a.cfg.MaxSplitSize; m > 0 && !a.cfg.ExpandableSegments {
		// Do not return an oversized block for a smaller request, and let an
		// oversized request round up by less than LargeBuffer only.
		if size < m && best.size >= m || size >= m && best.size >= size+LargeBuffer {
			return nil
		}
	}
	return best
}

// before orders free blocks by size, then segment, then address.
func before(x, y *block) bool {
	if x.size != y.size {
		return x.size < y.size
	}
	if x.seg.id != y.seg.id {
		return x.seg.id < y.seg.id
	}
	return x.off < y.off
}

// shouldSplit is should_split: small-pool and expandable blocks split when
// at least 512 B remain; large blocks when more than 1 MiB remains and the
// request is below max_split_size.
func (a *Allocator) shouldSplit(b *block, size int64) bool {
	remaining := b.size - size
	if b.seg.small || a.cfg.ExpandableSegments {
		return remaining >= MinBlockSize
	}
	if m := a.cfg.MaxSplitSize; m > 0 && size >= m {
		return false
	}
	return remaining > SmallSize
}

// newSegment is alloc_block: cudaMalloc a segment for the request; when the
// device is full, release every whole cached segment and retry once
// (release_cached_blocks).
func (a *Allocator) newSegment(small bool, size int64) (*block, error) {
	segSize := AllocationSize(size)
	if !a.fits(segSize) {
		a.releaseCached()
		if !a.fits(segSize) {
			return nil, ErrOutOfMemory
		}
	}
	a.nextSeg++
	s := &segment{id: a.nextSeg, small: small, size: segSize}
	b := &block{seg: s, size: segSize}
	s.blocks = []*block{b}
	a.segments = append(a.segments, s)
	a.reserve(segSize)
	a.stats.Segments++
	a.addFree(b)
	return b, nil
}

// grow maps pages onto the end of the pool's expandable segment until its
// trailing free block holds size (find_expandable_block and map_block).
func (a *Allocator) grow(small bool, size int64) (*block, error) {
	p := poolIndex(small)
	page := LargeBuffer
	if small {
		page = SmallBuffer
	}
	s := a.expand[p]
	if s == nil {
		a.nextSeg++
		s = &segment{id: a.nextSeg, small: small}
		a.expand[p] = s
		a.segments = append(a.segments, s)
		a.stats.Segments++
	}
	var tail *block
	if n := len(s.blocks); n > 0 && !s.blocks[n-1].allocated {
		tail = s.blocks[n-1]
	}
	need := size
	if tail != nil {
		need -= tail.size
	}
	mapped := (need + page - 1) / page * page
	if !a.fits(mapped) {
		a.releaseCached()
		if n := len(s.blocks); n > 0 && !s.blocks[n-1].allocated {
			tail = s.blocks[n-1]
		} else {
			tail = nil
		}
		need = size
		if tail != nil {
			need -= tail.size
		}
		mapped = (need + page - 1) / page * page
		if !a.fits(mapped) {
			return nil, ErrOutOfMemory
		}
	}
	a.reserve(mapped)
	s.size += mapped
	if tail != nil {
		a.removeFree(tail)
		tail.size += mapped
		a.addFree(tail)
		return tail, nil
	}
	b := &block{seg: s, off: s.size - mapped, size: mapped}
	s.blocks = append(s.blocks, b)
	a.addFree(b)
	return b, nil
}

func (a *Allocator) fits(n int64) bool {
	return a.cfg.Capacity <= 0 || a.stats.Reserved+n <= a.cfg.Capacity
}

func (a *Allocator) reserve(n int64) {
	a.stats.Reserved += n
	a.stats.PeakReserved = max(a.stats.PeakReserved, a.stats.Reserved)
}

// releaseCached is release_cached_blocks: cudaFree every segment that is one
// free block; of an expandable segment, unmap the whole pages of its free
// tail.
func (a *Allocator) releaseCached() {
	a.stats.Releases++
	kept := a.segments[:0]
	for _, s := range a.segments {
		expandable := a.expand[poolIndex(s.small)] == s
		if expandable {
			page := LargeBuffer
			if s.small {
				page = SmallBuffer
			}
			if n := len(s.blocks); n > 0 && !s.blocks[n-1].allocated {
				t := s.blocks[n-1]
				// Whole pages only: the segment ends on a page boundary.
				drop := max(0, s.size-(t.off+page-1)/page*page)
				a.removeFree(t)
				t.size -= drop
				s.size -= drop
				a.stats.Reserved -= drop
				if t.size == 0 {
					s.blocks = s.blocks[:n-1]
				} else {
					a.addFree(t)
				}
			}
			kept = append(kept, s)
			continue
		}
		if len(s.blocks) == 1 && !s.blocks[0].allocated {
			a.removeFree(s.blocks[0])
			a.stats.Reserved -= s.size
			a.stats.Segments--
			continue
		}
		kept = append(kept, s)
	}
	a.segments = kept
}

func (a *Allocator) addFree(b *block) {
	p := poolIndex(b.seg.small)
	free := a.free[p]
	i := sort.Search(len(free), func(i int) bool { return !before(free[i], b) })
	free = append(free, nil)
	copy(free[i+1:], free[i:])
	free[i] = b
	a.free[p] = free
}

func (a *Allocator) removeFree(b *block) {
	p := poolIndex(b.seg.small)
	free := a.free[p]
	i := sort.Search(len(free), func(i int) bool { return !before(free[i], b) })
	for ; i < len(free); i++ {
		if free[i] == b {
			a.free[p] = append(free[:i], free[i+1:]...)
			return
		}
	}
}

func (a *Allocator) insertAfter(b, rest *block) {
	bs := b.seg.blocks
	i := indexOf(bs, b)
	bs = append(bs, nil)
	copy(bs[i+2:], bs[i+1:])
	bs[i+1] = rest
	b.seg.blocks = bs
}

func indexOf(bs []*block, b *block) int {
	i := sort.Search(len(bs), func(i int) bool { return bs[i].off >= b.off })
	if i < len(bs) && bs[i] == b {
		return i
	}
	for j, c := range bs {
		if c == b {
			return j
		}
	}
	return -1
}
