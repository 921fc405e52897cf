package placement

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/gpu"
	"github.com/google/go-cmp/cmp"
)

func card(t *testing.T, name string) gpu.Card {
	t.Helper()
	k, err := gpu.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// detected are devices as a probe reports them: total and free GiB per
// device, MIG where mig names the index.
func detected(totalFree [][2]int64, mig ...int) []gpu.Device {
	var ds []gpu.Device
	for i, tf := range totalFree {
		ds = append(ds, gpu.Device{Index: i, Name: "GPU", TotalMiB: tf[0] * 1024, FreeMiB: tf[1] * 1024, UsedMiB: (tf[0] - tf[1]) * 1024, MIG: slices.Contains(mig, i)})
	}
	return ds
}

func TestBudgetCard(t *testing.T) {
	h100, r4090 := card(t, "h100"), card(t, "rtx-4090")
	for _, tt := range []struct {
		name  string
		setup func() (Setup, error)
		// want: the budget card's name and index, total, available, source.
		wantName              string
		wantIndex             int
		wantTotal, wantAvail  int64
		wantSource            string
		wantListed, wantDevs  int
		wantNote, wantErrOf   string
		wantNoReading, wantIE bool
	}{
		{name: "table card", setup: func() (Setup, error) { return OnCard(&h100, h100.MemoryBytes(), 0) },
			wantName: h100.Name, wantIndex: -1, wantTotal: h100.MemoryBytes(), wantSource: BudgetCardTotal},
		{name: "memory only, free given", setup: func() (Setup, error) { return OnCard(nil, 24*gib, 20*gib) },
			wantIndex: -1, wantTotal: 24 * gib, wantAvail: 20 * gib, wantSource: BudgetGivenFree},
		{name: "free above the card", setup: func() (Setup, error) { return OnCard(&r4090, r4090.MemoryBytes(), 30*gib) }, wantErrOf: "the card"},
		{name: "list: the smallest card bounds", setup: func() (Setup, error) {
			return OnCardList([]gpu.GPUSpec{{Count: 2, Card: h100}, {Count: 1, Card: r4090}}, 0)
		}, wantName: r4090.Name, wantIndex: -1, wantTotal: r4090.MemoryBytes(), wantSource: BudgetCardTotal, wantListed: 3, wantDevs: 3, wantNote: "heterogeneous GPUs"},
		{name: "list: free above the smallest", setup: func() (Setup, error) {
			return OnCardList([]gpu.GPUSpec{{Count: 2, Card: h100}, {Count: 1, Card: r4090}}, 30*gib)
		}, wantErrOf: r4090.Name},
		{name: "detected: most free", setup: func() (Setup, error) { return OnDetected(detected([][2]int64{{24, 10}, {24, 20}, {80, 80}}, 2), 0) },
			wantName: "GPU", wantIndex: 1, wantTotal: 24 * gib, wantAvail: 20 * gib, wantSource: BudgetDetectedFree, wantDevs: 3, wantNote: "GPU 2 (GPU) has MIG enabled and is not planned for"},
		{name: "detected: free given", setup: func() (Setup, error) { return OnDetected(detected([][2]int64{{24, 10}}), 21*gib) },
			wantName: "GPU", wantIndex: 0, wantTotal: 24 * gib, wantAvail: 21 * gib, wantSource: BudgetGivenFree, wantDevs: 1},
		{name: "detected: free above the total", setup: func() (Setup, error) { return OnDetected(detected([][2]int64{{24, 10}}), 30*gib) }, wantErrOf: "detected GPU 0"},
		{name: "detected: only MIG, no budget", setup: func() (Setup, error) { return OnDetected(detected([][2]int64{{80, 80}}, 0), 0) },
			wantIndex: -1, wantDevs: 1, wantNote: "no detected GPU can be planned for: no verdict"},
		{name: "detected: a full card is no budget", setup: func() (Setup, error) { return OnDetected(detected([][2]int64{{24, 0}}), 0) },
			wantIndex: -1, wantDevs: 1, wantNote: "no detected GPU can be planned for: no verdict"},
		{name: "indices: the least free bounds", setup: func() (Setup, error) {
			return OnIndices(detected([][2]int64{{24, 10}, {24, 20}, {24, 5}}), []int{1, 0})
		},
			wantName: "GPU", wantIndex: 0, wantTotal: 24 * gib, wantAvail: 10 * gib, wantSource: BudgetDetectedFree, wantListed: 2, wantDevs: 3, wantNote: "GPU 0 has the least free memory of --gpus 1,0"},
		{name: "indices: not on the machine", setup: func() (Setup, error) { return OnIndices(detected([][2]int64{{24, 10}}), []int{5}) }, wantIE: true},
		{name: "indices: no memory reading", setup: func() (Setup, error) {
			ds := detected([][2]int64{{24, 10}})
			ds[0].TotalMiB = gpu.Unknown
			return OnIndices(ds, []int{0})
		}, wantNoReading: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := tt.setup()
			var be *BudgetError
			var nr *NoReadingError
			var ie *IndexError
			switch {
			case tt.wantErrOf != "":
				if !errors.As(err, &be) || be.Of != tt.wantErrOf {
					t.Fatalf("err = %v, want a BudgetError of %q", err, tt.wantErrOf)
				}
				return
			case tt.wantNoReading:
				if !errors.As(err, &nr) {
					t.Fatalf("err = %v, want a NoReadingError", err)
				}
				return
			case tt.wantIE:
				if !errors.As(err, &ie) {
					t.Fatalf("err = %v, want an IndexError", err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			type view struct {
				Name                string
				Index               int
				Total, Avail        int64
				Source              string
				Listed, Devs        int
				Detected, HasDevice bool
			}
			got := view{s.Name, s.Index, s.Total, s.Available, s.BudgetSource, s.Listed, len(s.Devices), s.Detected, false}
			want := view{tt.wantName, tt.wantIndex, tt.wantTotal, tt.wantAvail, tt.wantSource, tt.wantListed, tt.wantDevs, tt.wantIndex >= 0, false}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("setup (-want +got):\n%s", d)
			}
			if tt.wantNote != "" && !slices.ContainsFunc(s.Notes, func(n string) bool { return strings.Contains(n, tt.wantNote) }) {
				t.Errorf("notes %q lack %q", s.Notes, tt.wantNote)
			}
		})
	}
}

// A card list's devices stand in for the cards, numbered by position, each
// with the free memory given (capped at the card's).
func TestCardListDevices(t *testing.T) {
	h100 := card(t, "h100")
	s, err := OnCardList([]gpu.GPUSpec{{Count: 2, Card: h100}}, 70*gib)
	if err != nil {
		t.Fatal(err)
	}
	var got [][2]int64
	for _, d := range s.Devices {
		got = append(got, [2]int64{int64(d.Index), d.FreeMiB})
	}
	if d := cmp.Diff([][2]int64{{0, 70 * 1024}, {1, 70 * 1024}}, got); d != "" {
		t.Errorf("devices (-want +got):\n%s", d)
	}
}

func TestSizeWorld(t *testing.T) {
	h100 := card(t, "h100")
	list := func(n int) func() Setup {
		return func() Setup {
			s, err := OnCardList([]gpu.GPUSpec{{Count: n, Card: h100}}, 0)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	}
	one := func() Setup {
		s, err := OnCard(&h100, h100.MemoryBytes(), 0)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tt := range []struct {
		name                   string
		setup                  func() Setup
		st                     estimate.Strategy
		perNode, nodes         int64
		wantPerNode, wantWorld int64
		wantSharding           int64
		wantReason             WorldReason
	}{
		{"list sets the world", list(4), estimate.ZeRO3, 0, 1, 4, 4, 4, 0},
		{"nodes multiply it", list(4), estimate.FSDPFullShard, 0, 2, 4, 8, 8, 0},
		{"hybrid shards within a node", list(4), estimate.FSDPHybridShard, 0, 2, 4, 8, 4, 0},
		{"list without a strategy: one GPU holds the run", list(4), estimate.NoSharding, 0, 1, 1, 1, 1, 0},
		{"GPUs per node without a strategy are replicas", one, estimate.NoSharding, 4, 1, 4, 4, 4, 0},
		{"per node as the list says", list(4), estimate.DDP, 4, 1, 4, 4, 4, 0},
		{"per node against the list", list(4), estimate.DDP, 2, 1, 0, 0, 0, PerNodeDisagrees},
		{"nodes need a strategy", one, estimate.NoSharding, 0, 2, 0, 0, 0, NodesWithoutDataParallel},
		{"a strategy on one GPU", one, estimate.ZeRO2, 0, 1, 0, 0, 0, TooFewGPUs},
		{"largest world", one, estimate.ZeRO3, estimate.MaxGPUs, 1, estimate.MaxGPUs, estimate.MaxGPUs, estimate.MaxGPUs, 0},
		{"beyond the largest world", one, estimate.ZeRO3, 8, 9000, 0, 0, 0, TooManyGPUs},
		// 65536 × 2^62 wraps to 0 in int64: refused, not read as no GPUs.
		{"a product that would wrap", one, estimate.ZeRO3, 1 << 16, 1 << 62, 0, 0, 0, TooManyGPUs},
		{"per node beyond int range", one, estimate.ZeRO3, 1 << 62, 4, 0, 0, 0, TooManyGPUs},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.setup()
			err := s.SizeWorld(tt.st, tt.perNode, tt.nodes)
			if tt.wantReason != 0 {
				var we *WorldError
				if !errors.As(err, &we) || we.Reason != tt.wantReason {
					t.Fatalf("err = %v, want reason %d", err, tt.wantReason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff([3]int64{tt.wantPerNode, tt.wantWorld, tt.wantSharding}, [3]int64{s.PerNode, s.World, s.ShardingGPUs}); d != "" {
				t.Errorf("per node, world, sharding GPUs (-want +got):\n%s", d)
			}
		})
	}
}

// A sharded run on detected GPUs uses those that can be used, and the one
// with the least free memory among them becomes the budget card; the note
// that named the most-free card goes.
func TestSizeWorldOnDetected(t *testing.T) {
	s, err := OnDetected(detected([][2]int64{{80, 70}, {80, 40}, {80, 60}, {80, 80}}, 3), 0)
	if err != nil {
		t.Fatal(err)
	}
	if s.Index != 0 {
		t.Fatalf("budget card %d before sizing, want the most free (0)", s.Index)
	}
	if err := s.SizeWorld(estimate.ZeRO3, 0, 2); err != nil {
		t.Fatal(err)
	}
	if s.PerNode != 3 || s.World != 6 || s.Index != 1 || s.Available != 40*gib {
		t.Errorf("per node %d, world %d, budget GPU %d with %d B; want 3, 6, GPU 1 with 40 GiB", s.PerNode, s.World, s.Index, s.Available)
	}
	want := []string{
		"GPU 3 (GPU) has MIG enabled and is not planned for: no process sees the whole card",
		"data-parallel over detected GPUs 0,1,2: GPU 1 has the least free memory and bounds every rank (--gpus 0,2 leaves it out)",
		"the other 1 nodes are assumed to match this one",
	}
	if d := cmp.Diff(want, s.Notes); d != "" {
		t.Errorf("notes (-want +got):\n%s", d)
	}
}

func TestFeatures(t *testing.T) {
	a100, t4 := card(t, "a100-80gb"), card(t, "t4")
	list := func(cs ...gpu.Card) Setup {
		var specs []gpu.GPUSpec
		for _, c := range cs {
			specs = append(specs, gpu.GPUSpec{Count: 1, Card: c})
		}
		s, err := OnCardList(specs, 0)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tt := range []struct {
		name  string
		setup Setup
		want  *estimate.CardFeatures
	}{
		{"one Ampere card", list(a100), &estimate.CardFeatures{Name: a100.Name, BF16: true, FlashAttention2: true}},
		// The list's smallest card is the budget card, and any card of the
		// run without a feature takes it away from the run.
		{"a T4 among A100s", list(a100, t4, a100), &estimate.CardFeatures{Name: t4.Name, BF16: false, FlashAttention2: false}},
		{"memory only", Setup{Total: 24 * gib}, nil},
		{"detected card not in the table", Setup{Devices: detected([][2]int64{{24, 20}})}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if d := cmp.Diff(tt.want, tt.setup.Features()); d != "" {
				t.Errorf("features (-want +got):\n%s", d)
			}
		})
	}
	var r estimate.Request
	s := list(a100, a100)
	if err := s.SizeWorld(estimate.FSDPFullShard, 0, 1); err != nil {
		t.Fatal(err)
	}
	s.Apply(&r)
	if r.GPUTotal != a100.MemoryBytes() || r.Sharding.GPUs != 2 || r.Card == nil || r.Card.Name != a100.Name {
		t.Errorf("Apply: GPUTotal %d, Sharding.GPUs %d, Card %+v", r.GPUTotal, r.Sharding.GPUs, r.Card)
	}
}

func TestNodeGPUs(t *testing.T) {
	s, err := OnDetected(detected([][2]int64{{80, 70}, {80, 40}, {80, 80}}, 2), 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.NodeGPUs(2); n != 2 {
		t.Errorf("detected: %d GPUs per node, want the 2 without MIG", n)
	}
	if !slices.Contains(s.Notes, "the other 1 nodes are assumed to match this one") {
		t.Errorf("notes %q lack the other nodes", s.Notes)
	}
	one, _ := OnCard(nil, 24*gib, 0)
	if n := one.NodeGPUs(1); n != 1 {
		t.Errorf("one card: %d", n)
	}
}
