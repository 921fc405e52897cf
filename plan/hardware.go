package plan

import (
	"github.com/canifinetune/canifinetune/gpu"
)

// DefaultEffectiveBatch is the sequences per optimizer update over all GPUs
// a plan keeps when none is asked for: the request's micro-batch × gradient
// accumulation when that is above 1, else 16 (a common fine-tuning update
// size, which leaves the search room to trade micro-batches for GPUs).
func DefaultEffectiveBatch(batch, gradAccum int64) int64 {
	if b := max(batch, 1) * max(gradAccum, 1); b > 1 {
		return b
	}
	return 16
}

// HardwareChoice is what the caller says about the hardware beyond the
// cards: each zero value means "the default".
type HardwareChoice struct {
	// Link is the interconnect data-parallel traffic crosses: on one node
	// it links the GPUs, across nodes it links the nodes ("": the card's
	// default within a node, InfiniBand across nodes).
	Link Interconnect
	// PeakTFLOPs replaces the table's dense 16-bit peak; MFU the default
	// model-FLOPs utilisation.
	PeakTFLOPs, MFU float64
}

// LinkError is an interconnect whose bandwidth is unknown for the cards;
// Inter reports that it links the nodes (else the GPUs of a node).
type LinkError struct {
	Inter bool
	Err   error
}

func (e *LinkError) Error() string { return e.Err.Error() }
func (e *LinkError) Unwrap() error { return e.Err }

// HardwareFor is the time model's view of the run's GPUs (their table
// rows): the slowest card's dense 16-bit peak, since every rank waits for
// it (unknown, 0, when any card's is), the link within a node (NVLink for
// SXM datacenter cards, else PCIe), between nodes and to the host. The
// notes say what is missing.
func HardwareFor(cards []*gpu.Card, gpusPerNode, nodes int64, c HardwareChoice) (Hardware, []string, error) {
	var hw Hardware
	var notes []string
	var slow *gpu.Card
	for _, k := range cards {
		if k.DenseTFLOPs16 == nil {
			slow = nil
			break
		}
		if slow == nil || *k.DenseTFLOPs16 < *slow.DenseTFLOPs16 {
			slow = k
		}
	}
	arch, name := "", ""
	if len(cards) > 0 {
		arch, name = cards[0].Arch, cards[0].Name
	}
	if slow != nil {
		hw.PeakTFLOPs = *slow.DenseTFLOPs16
		arch, name = slow.Arch, slow.Name
	}
	if c.PeakTFLOPs > 0 {
		hw.PeakTFLOPs = c.PeakTFLOPs
	}
	// The slowest memory too: every rank waits for the one that
	// dequantizes slowest.
	for i, k := range cards {
		if k.MemoryGBps == nil {
			hw.MemBytesPerSec = 0
			break
		}
		if b := *k.MemoryGBps * 1e9; i == 0 || b < hw.MemBytesPerSec {
			hw.MemBytesPerSec = b
		}
	}
	hw.MFU, hw.MFUSource = c.MFU, "--mfu"
	if c.MFU <= 0 {
		class := ClassOf(name)
		hw.MFU, hw.MFUSource = ClassMFU[class], MFUSource(class)
	}
	intra, inter := DefaultInterconnect(name, arch), InfiniBand
	if c.Link != "" {
		if nodes > 1 {
			inter = c.Link
		} else {
			intra = c.Link
		}
	}
	var err error
	if hw.Intra, err = LinkFor(intra, arch, gpusPerNode); err != nil {
		return hw, nil, &LinkError{Inter: false, Err: err}
	}
	if hw.Inter, err = LinkFor(inter, arch, gpusPerNode); err != nil {
		return hw, nil, &LinkError{Inter: true, Err: err}
	}
	hw.Host, _ = LinkFor(PCIe, arch, gpusPerNode)
	if hw.PeakTFLOPs == 0 {
		notes = append(notes, "the GPU table has no dense 16-bit peak for this card: plans are ranked without a time (--peak-tflops gives one)")
	} else if hw.MemBytesPerSec == 0 {
		notes = append(notes, "the GPU table has no memory bandwidth for this card: QLoRA plans' 4-bit dequantization is not timed")
	}
	return hw, notes, nil
}
