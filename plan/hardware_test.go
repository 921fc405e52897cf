package plan

import (
	"errors"
	"testing"

	"github.com/canifinetune/canifinetune/gpu"
)

func TestDefaultEffectiveBatch(t *testing.T) {
	for _, tt := range []struct{ batch, accum, want int64 }{
		{1, 1, 16}, {0, 0, 16}, {4, 1, 4}, {2, 8, 16}, {1, 32, 32},
	} {
		if got := DefaultEffectiveBatch(tt.batch, tt.accum); got != tt.want {
			t.Errorf("DefaultEffectiveBatch(%d, %d) = %d, want %d", tt.batch, tt.accum, got, tt.want)
		}
	}
}

func TestHardwareFor(t *testing.T) {
	look := func(name string) *gpu.Card {
		k, err := gpu.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		return &k
	}
	h100, r4090, t4 := look("h100"), look("rtx-4090"), look("t4")
	noPeak := *t4
	noPeak.DenseTFLOPs16 = nil
	for _, tt := range []struct {
		name             string
		cards            []*gpu.Card
		nodes            int64
		choice           HardwareChoice
		wantPeak         float64
		wantIntra        Interconnect
		wantInter        Interconnect
		wantNotes        int
		wantLinkErrInter *bool
	}{
		{"SXM card: NVLink inside, InfiniBand between", []*gpu.Card{h100}, 2, HardwareChoice{}, *h100.DenseTFLOPs16, DefaultInterconnect(h100.Name, h100.Arch), InfiniBand, 0, nil},
		{"the slowest card's peak", []*gpu.Card{h100, r4090}, 1, HardwareChoice{}, min(*h100.DenseTFLOPs16, *r4090.DenseTFLOPs16), "", InfiniBand, 0, nil},
		{"one card without a peak: no time", []*gpu.Card{h100, &noPeak}, 1, HardwareChoice{}, 0, "", InfiniBand, 1, nil},
		{"the peak given", []*gpu.Card{&noPeak}, 1, HardwareChoice{PeakTFLOPs: 100}, 100, "", InfiniBand, 0, nil},
		{"the link on one node links the GPUs", []*gpu.Card{h100}, 1, HardwareChoice{Link: PCIe}, *h100.DenseTFLOPs16, PCIe, InfiniBand, 0, nil},
		{"the link across nodes links the nodes", []*gpu.Card{h100}, 2, HardwareChoice{Link: Ethernet}, *h100.DenseTFLOPs16, DefaultInterconnect(h100.Name, h100.Arch), Ethernet, 0, nil},
		{"NVLink on a card without it", []*gpu.Card{t4}, 1, HardwareChoice{Link: NVLink}, 0, "", "", 0, new(false)},
		{"NVLink between nodes of cards without it", []*gpu.Card{t4}, 2, HardwareChoice{Link: NVLink}, 0, "", "", 0, new(true)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hw, notes, err := HardwareFor(tt.cards, 4, tt.nodes, tt.choice)
			if tt.wantLinkErrInter != nil {
				var le *LinkError
				if !errors.As(err, &le) || le.Inter != *tt.wantLinkErrInter {
					t.Fatalf("err = %v, want a LinkError with Inter %v", err, *tt.wantLinkErrInter)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if hw.PeakTFLOPs != tt.wantPeak {
				t.Errorf("peak %v, want %v", hw.PeakTFLOPs, tt.wantPeak)
			}
			if tt.wantIntra != "" && hw.Intra.Kind != tt.wantIntra {
				t.Errorf("intra %s, want %s", hw.Intra.Kind, tt.wantIntra)
			}
			if hw.Inter.Kind != tt.wantInter || hw.Host.Kind != PCIe {
				t.Errorf("inter %s host %s, want %s and pcie", hw.Inter.Kind, hw.Host.Kind, tt.wantInter)
			}
			if len(notes) != tt.wantNotes {
				t.Errorf("notes %q, want %d", notes, tt.wantNotes)
			}
		})
	}
}
