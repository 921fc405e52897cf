package gpu

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func dev(index int, freeMiB int64) Device {
	return Device{Index: index, Name: "GPU", TotalMiB: 81920, UsedMiB: 81920 - freeMiB, FreeMiB: freeMiB}
}

// TestSelectGPUs checks the greedy placement against hand-computed pools:
// usable = free[first] + 0.85 × free[others] (seed 001 §8).
func TestSelectGPUs(t *testing.T) {
	const g = GiB
	devs := []Device{dev(0, 20*1024), dev(1, 80*1024), dev(2, 40*1024), dev(3, 80*1024)}
	tests := []struct {
		name        string
		required    int64
		devs        []Device
		wantIdx     []int
		wantUsable  int64
		wantFits    bool
		wantMap     string
		wantLeftOut []int
	}{
		// One GPU with the most free memory (ties by index: 1 before 3) is enough.
		{"one", 70 * g, devs, []int{1}, 80 * g, true, "sequential", []int{0, 2, 3}},
		// 80 + 0.85×80 = 148 GiB ≥ 100.
		{"two", 100 * g, devs, []int{1, 3}, 80*g + 68*g, true, "balanced", []int{0, 2}},
		// 148 < 160 → add GPU 2: 148 + 0.85×40 = 182 GiB.
		{"three", 160 * g, devs, []int{1, 3, 2}, 182 * g, true, "balanced", []int{0}},
		// 182 + 0.85×20 = 199 GiB < 200: all four, does not fit.
		{"all short", 200 * g, devs, []int{1, 3, 2, 0}, 199 * g, false, "balanced", nil},
		// Exactly the pool is enough: ≥, not >.
		{"exact", 148 * g, devs, []int{1, 3}, 148 * g, true, "balanced", []int{0, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := SelectGPUs(tt.required, tt.devs)
			if err != nil {
				t.Fatal(err)
			}
			var left []int
			for _, l := range s.LeftOut {
				left = append(left, l.Index)
				if !strings.Contains(l.Reason, "not needed") {
					t.Errorf("GPU %d left out for %q", l.Index, l.Reason)
				}
			}
			got := struct {
				Idx    []int
				Usable int64
				Fits   bool
				Map    string
				Left   []int
			}{s.Indices(), s.UsableBytes, s.Fits, s.DeviceMap, left}
			want := struct {
				Idx    []int
				Usable int64
				Fits   bool
				Map    string
				Left   []int
			}{tt.wantIdx, tt.wantUsable, tt.wantFits, tt.wantMap, tt.wantLeftOut}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}

	// The first GPU counts in full, the others at 85 %.
	s, _ := SelectGPUs(100*g, devs)
	if s.GPUs[0].CountedBytes != 80*g || s.GPUs[1].CountedBytes != 68*g {
		t.Errorf("counted = %d, %d", s.GPUs[0].CountedBytes, s.GPUs[1].CountedBytes)
	}

	// MIG and unknown free memory are left out with their reasons.
	odd := []Device{dev(0, 10*1024), {Index: 1, Name: "MIG", FreeMiB: 80000, MIG: true}, {Index: 2, Name: "NA", FreeMiB: Unknown}}
	s, err := SelectGPUs(5*g, odd)
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(s.Indices(), []int{0}) || len(s.LeftOut) != 2 ||
		!strings.Contains(s.LeftOut[0].Reason, "MIG") || !strings.Contains(s.LeftOut[1].Reason, "unknown") {
		t.Errorf("selection = %+v", s)
	}

	if _, err := SelectGPUs(0, devs); err == nil {
		t.Error("zero requirement accepted")
	}
	if _, err := SelectGPUs(g, nil); !errors.Is(err, ErrNoGPU) {
		t.Errorf("no devices: %v", err)
	}
}

func TestSelectExplicit(t *testing.T) {
	const g = GiB
	devs := []Device{dev(0, 20*1024), dev(1, 80*1024), dev(2, 40*1024)}
	s, err := SelectExplicit([]int{2, 0}, 50*g, devs)
	if err != nil {
		t.Fatal(err)
	}
	// 40 + 0.85×20 = 57 GiB, in the order given.
	if !cmp.Equal(s.Indices(), []int{2, 0}) || s.UsableBytes != 57*g || !s.Fits || s.DeviceMap != "balanced" || !s.Explicit {
		t.Errorf("selection = %+v", s)
	}
	if len(s.LeftOut) != 1 || s.LeftOut[0].Index != 1 || s.LeftOut[0].Reason != "not named in --gpus" {
		t.Errorf("left out = %+v", s.LeftOut)
	}
	if s, _ := SelectExplicit([]int{0}, 30*g, devs); s.Fits || s.DeviceMap != "sequential" {
		t.Errorf("one small GPU: %+v", s)
	}
	for _, tt := range []struct {
		ids  []int
		want string
	}{
		{[]int{5}, "GPU 5 is not on this machine; detected GPUs: 0,1,2"},
		{[]int{1, 1}, "named twice"},
		{nil, "no GPU index"},
	} {
		if _, err := SelectExplicit(tt.ids, g, devs); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("SelectExplicit(%v) error %v, want %q", tt.ids, err, tt.want)
		}
	}
	mig := []Device{{Index: 0, Name: "A100", MIG: true, FreeMiB: 100}}
	if _, err := SelectExplicit([]int{0}, g, mig); err == nil || !strings.Contains(err.Error(), "MIG") {
		t.Errorf("MIG GPU accepted: %v", err)
	}
}

func TestInventoryHelpers(t *testing.T) {
	inv := Inventory{GPUs: []Device{dev(0, 100), {Index: 1, FreeMiB: 90000, MIG: true}, dev(2, 5000), dev(3, 5000), {Index: 4, FreeMiB: Unknown}}}
	if d, ok := inv.MostFree(); !ok || d.Index != 2 {
		t.Errorf("MostFree = %d, %v; want GPU 2 (MIG GPU 1 skipped, tie 2/3 to the lower index)", d.Index, ok)
	}
	if _, ok := (Inventory{}).MostFree(); ok {
		t.Error("MostFree of no GPUs found one")
	}
	if d, ok := inv.Device(3); !ok || d.FreeMiB != 5000 {
		t.Errorf("Device(3) = %+v, %v", d, ok)
	}
	if _, ok := inv.Device(9); ok {
		t.Error("Device(9) found")
	}
}
