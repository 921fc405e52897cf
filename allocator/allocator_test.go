package allocator

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	KiB int64 = 1 << 10
	MiB int64 = 1 << 20
)

func TestRoundAndAllocationSize(t *testing.T) {
	round := []struct{ in, want int64 }{
		{0, 512}, {1, 512}, {512, 512}, {513, 1024}, {MiB + 1, MiB + 512},
	}
	for _, c := range round {
		if got := RoundSize(c.in); got != c.want {
			t.Errorf("RoundSize(%d) = %d, want %d", c.in, got, c.want)
		}
	}
	seg := []struct{ in, want int64 }{
		{512, 2 * MiB}, {MiB, 2 * MiB}, {MiB + 512, 20 * MiB}, {10*MiB - 512, 20 * MiB},
		{10 * MiB, 10 * MiB}, {10*MiB + 512, 12 * MiB}, {101 * MiB, 102 * MiB},
	}
	for _, c := range seg {
		if got := AllocationSize(c.in); got != c.want {
			t.Errorf("AllocationSize(%d) = %d, want %d", c.in, got, c.want)
		}
	}
}

// op is one step of a crafted trace: allocate size bytes under name, or
// (size 0) free name.
type op struct {
	name string
	size int64
}

func alloc(name string, size int64) op { return op{name, size} }
func free(name string) op              { return op{name: name} }

// TestTraces replays crafted alloc/free sequences; each expectation is
// derived by hand from the rules in CUDACachingAllocator.cpp (see the
// comments).
func TestTraces(t *testing.T) {
	type want struct {
		Allocated, Reserved, PeakReserved int64
		Segments, Releases                int
	}
	tests := []struct {
		name string
		cfg  Config
		ops  []op
		want want
	}{{
		// Three 1000 B requests round to 1024 B each and share one 2 MiB small segment.
		name: "small requests pack into one 2 MiB segment",
		ops:  []op{alloc("a", 1000), alloc("b", 1000), alloc("c", 1000)},
		want: want{Allocated: 3 * KiB, Reserved: 2 * MiB, PeakReserved: 2 * MiB, Segments: 1},
	}, {
		// 5 MiB → a 20 MiB segment, split (15 MiB left); the second 5 MiB is
		// cut from that; 11 MiB does not fit the 10 MiB left → a 12 MiB
		// segment, not split (only 1 MiB would remain), so it counts 12 MiB.
		name: "1-10 MiB requests share a 20 MiB segment",
		ops:  []op{alloc("a", 5*MiB), alloc("b", 5*MiB), alloc("c", 11*MiB)},
		want: want{Allocated: 22 * MiB, Reserved: 32 * MiB, PeakReserved: 32 * MiB, Segments: 2},
	}, {
		// 19.5 MiB takes a 20 MiB segment; 0.5 MiB would remain, not more
		// than 1 MiB, so the block is not split and counts whole.
		name: "large block not split when 1 MiB or less remains",
		ops:  []op{alloc("a", 19*MiB+512*KiB)},
		want: want{Allocated: 20 * MiB, Reserved: 20 * MiB, PeakReserved: 20 * MiB, Segments: 1},
	}, {
		// The freed 100 MiB block serves 60 MiB (split, 40 MiB cached); 50 MiB
		// does not fit in 40 → a new 50 MiB segment: 40 MiB fragmentation.
		name: "a cached block is split for a smaller request",
		ops:  []op{alloc("a", 100*MiB), free("a"), alloc("b", 60*MiB), alloc("c", 50*MiB)},
		want: want{Allocated: 110 * MiB, Reserved: 150 * MiB, PeakReserved: 150 * MiB, Segments: 2},
	}, {
		// Growing shapes: 101 MiB cannot reuse the cached 100 MiB segment and
		// gets its own 102 MiB one; both stay reserved.
		name: "a slightly larger shape needs a new segment",
		ops:  []op{alloc("a", 100*MiB), free("a"), alloc("b", 101*MiB), free("b")},
		want: want{Allocated: 0, Reserved: 202 * MiB, PeakReserved: 202 * MiB, Segments: 2},
	}, {
		// expandable_segments: 100 MiB maps five 20 MiB pages; 101 MiB extends
		// the free tail by one more page: 120 MiB, not 202.
		name: "expandable segments grow in 20 MiB pages",
		cfg:  Config{ExpandableSegments: true},
		ops:  []op{alloc("a", 100*MiB), free("a"), alloc("b", 101*MiB), free("b")},
		want: want{Allocated: 0, Reserved: 120 * MiB, PeakReserved: 120 * MiB, Segments: 1},
	}, {
		// expandable small pool: three 1 MiB requests map 2 MiB pages: 4 MiB.
		name: "expandable small pool grows in 2 MiB pages",
		cfg:  Config{ExpandableSegments: true},
		ops:  []op{alloc("a", MiB), alloc("b", MiB), alloc("c", MiB)},
		want: want{Allocated: 3 * MiB, Reserved: 4 * MiB, PeakReserved: 4 * MiB, Segments: 1},
	}, {
		// Freeing the first and second 4 MiB blocks merges them into 8 MiB,
		// which serves an 8 MiB request without a new segment.
		name: "freed neighbours merge",
		ops: []op{alloc("a", 4*MiB), alloc("b", 4*MiB), alloc("c", 4*MiB), free("b"), free("a"),
			alloc("d", 8*MiB)},
		want: want{Allocated: 12 * MiB, Reserved: 20 * MiB, PeakReserved: 20 * MiB, Segments: 1},
	}, {
		// max_split_size 64 MiB: the cached 200 MiB block is oversize, so a
		// 10 MiB request gets its own segment; 190 MiB may take it whole
		// (200 < 190 + 20) and does not split it.
		name: "max_split_size keeps oversize blocks whole",
		cfg:  Config{MaxSplitSize: 64 * MiB},
		ops:  []op{alloc("a", 200*MiB), free("a"), alloc("b", 10*MiB), alloc("c", 190*MiB)},
		want: want{Allocated: 210 * MiB, Reserved: 210 * MiB, PeakReserved: 210 * MiB, Segments: 2},
	}, {
		// Without max_split_size the same 10 MiB request splits the 200 MiB block.
		name: "without max_split_size the oversize block is split",
		ops:  []op{alloc("a", 200*MiB), free("a"), alloc("b", 10*MiB), alloc("c", 190*MiB)},
		want: want{Allocated: 200 * MiB, Reserved: 200 * MiB, PeakReserved: 200 * MiB, Segments: 1},
	}, {
		// A full device: 70 MiB does not fit beside the cached 60 MiB segment
		// on a 100 MiB card, so the allocator releases it and retries.
		name: "a full device releases cached segments",
		cfg:  Config{Capacity: 100 * MiB},
		ops:  []op{alloc("a", 60*MiB), free("a"), alloc("b", 70*MiB)},
		want: want{Allocated: 70 * MiB, Reserved: 70 * MiB, PeakReserved: 70 * MiB, Segments: 1, Releases: 1},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := New(tc.cfg)
			h := map[string]Handle{}
			for _, o := range tc.ops {
				if o.size == 0 {
					if err := a.Free(h[o.name]); err != nil {
						t.Fatal(err)
					}
					continue
				}
				id, err := a.Malloc(o.size)
				if err != nil {
					t.Fatal(err)
				}
				h[o.name] = id
			}
			s := a.Stats()
			got := want{s.Allocated, s.Reserved, s.PeakReserved, s.Segments, s.Releases}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("stats (-want +got):\n%s", d)
			}
			if s.Fragmentation() != s.Reserved-s.Allocated {
				t.Errorf("fragmentation %d, want %d", s.Fragmentation(), s.Reserved-s.Allocated)
			}
		})
	}
}

func TestOutOfMemory(t *testing.T) {
	a := New(Config{Capacity: 100 * MiB})
	if _, err := a.Malloc(70 * MiB); err != nil {
		t.Fatal(err)
	}
	// Nothing cached to release: 70 + 40 MiB exceeds the card.
	if _, err := a.Malloc(40 * MiB); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("Malloc past capacity: err = %v, want ErrOutOfMemory", err)
	}
	if err := a.Free(12345); err == nil {
		t.Error("Free of an unknown handle: no error")
	}
}

// FuzzTrace replays arbitrary traces and checks the allocator's invariants:
// allocated never exceeds reserved, freeing everything leaves allocated at
// zero, and every segment's blocks tile it exactly.
func FuzzTrace(f *testing.F) {
	f.Add([]byte{10, 200, 3, 0, 90, 1, 255, 7}, false)
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9}, true)
	f.Fuzz(func(t *testing.T, data []byte, expandable bool) {
		a := New(Config{ExpandableSegments: expandable})
		var live []Handle
		for _, b := range data {
			if b%4 == 0 && len(live) > 0 {
				i := int(b/4) % len(live)
				if err := a.Free(live[i]); err != nil {
					t.Fatal(err)
				}
				live = append(live[:i], live[i+1:]...)
				continue
			}
			h, err := a.Malloc(int64(b) * int64(b) * 997)
			if err != nil {
				t.Fatal(err)
			}
			live = append(live, h)
			if s := a.Stats(); s.Allocated > s.Reserved {
				t.Fatalf("allocated %d > reserved %d", s.Allocated, s.Reserved)
			}
		}
		for _, h := range live {
			if err := a.Free(h); err != nil {
				t.Fatal(err)
			}
		}
		if s := a.Stats(); s.Allocated != 0 || s.Requested != 0 {
			t.Fatalf("after freeing all: %+v", s)
		}
		for _, s := range a.segments {
			var off int64
			for _, b := range s.blocks {
				if b.off != off {
					t.Fatalf("segment %d: block at %d, want %d", s.id, b.off, off)
				}
				off += b.size
			}
			if off != s.size {
				t.Fatalf("segment %d: blocks cover %d of %d", s.id, off, s.size)
			}
		}
	})
}
