package plan

import (
	"fmt"
	"math"
	"strings"

	"github.com/canifinetune/canifinetune/estimate"
)

// Interconnect is a link GPUs exchange gradients and parameters over.
type Interconnect string

// Interconnects.
const (
	NVLink     Interconnect = "nvlink"
	PCIe       Interconnect = "pcie"
	InfiniBand Interconnect = "infiniband"
	Ethernet   Interconnect = "ethernet"
)

// Interconnects lists the accepted values.
var Interconnects = []Interconnect{NVLink, PCIe, InfiniBand, Ethernet}

// Link is an interconnect with its bandwidth per GPU and direction.
type Link struct {
	Kind Interconnect
	// BytesPerSec is the nominal bandwidth one GPU sends at in one
	// direction. Collectives reach less than nominal, so communication time
	// computed from it is a lower bound.
	BytesPerSec float64
	Source      string
}

// newer reports whether an architecture is Hopper or later (PCIe Gen5,
// NVLink 4 and 400 Gb/s adapters per GPU in its reference systems).
func newer(arch string) bool { return arch == "Hopper" || arch == "Blackwell" }

// LinkFor is the nominal bandwidth of an interconnect for a GPU of an
// architecture, with its source; gpusPerNode divides a per-node link
// (Ethernet). NVLink figures exist for the NVIDIA datacenter generations
// only: elsewhere it is an error naming what to pass instead.
func LinkFor(kind Interconnect, arch string, gpusPerNode int64) (Link, error) {
	l := Link{Kind: kind}
	switch kind {
	case NVLink:
		switch arch {
		case "Ampere":
			l.BytesPerSec, l.Source = 300e9, "NVLink 3: 600 GB/s per A100 in both directions together (NVIDIA A100 datasheet), 300 GB/s each way"
		case "Hopper":
			l.BytesPerSec, l.Source = 450e9, "NVLink 4: 900 GB/s per H100/H200 SXM in both directions together (NVIDIA H100 datasheet), 450 GB/s each way"
		case "Blackwell":
			l.BytesPerSec, l.Source = 900e9, "NVLink 5: 1.8 TB/s per B200 in both directions together (NVIDIA HGX B200 datasheet), 900 GB/s each way"
		default:
			return l, fmt.Errorf("no NVLink bandwidth is known for %s GPUs: use --interconnect pcie", orUnknown(arch))
		}
	case PCIe:
		if newer(arch) {
			l.BytesPerSec, l.Source = 64e9, "PCIe Gen5 x16: 128 GB/s in both directions together (NVIDIA H100 datasheet), 64 GB/s each way"
		} else {
			l.BytesPerSec, l.Source = 32e9, "PCIe Gen4 x16: 64 GB/s in both directions together (NVIDIA A100 datasheet), 32 GB/s each way"
		}
	case InfiniBand:
		if newer(arch) {
			l.BytesPerSec, l.Source = 50e9, "one 400 Gb/s NDR InfiniBand adapter per GPU, as in NVIDIA DGX H100: 50 GB/s each way"
		} else {
			l.BytesPerSec, l.Source = 25e9, "one 200 Gb/s HDR InfiniBand adapter per GPU, as in NVIDIA DGX A100: 25 GB/s each way"
		}
	case Ethernet:
		n := max(gpusPerNode, 1)
		l.BytesPerSec = 12.5e9 / float64(n)
		l.Source = fmt.Sprintf("assumed: one 100 Gb/s Ethernet link per node (12.5 GB/s each way) shared by its %d GPU(s); RDMA fabrics: --interconnect infiniband", n)
	default:
		return l, fmt.Errorf("unknown interconnect %q (want nvlink, pcie, infiniband or ethernet)", kind)
	}
	return l, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "these"
	}
	return s
}

// DefaultInterconnect is the link a card's GPUs talk over within a node when
// the user names none: NVLink for the SXM-form NVIDIA datacenter cards (the
// HGX/DGX boards wire every GPU to NVSwitch), PCIe for every other card.
// Across nodes the default is InfiniBand.
func DefaultInterconnect(cardName, arch string) Interconnect {
	n := strings.ToUpper(cardName)
	if arch == "Ampere" || newer(arch) {
		for _, k := range []string{"SXM", "HBM3", "H200", "B200", "H800"} {
			if strings.Contains(n, k) && !strings.Contains(n, "NVL") && !strings.Contains(n, "PCIE") && !strings.Contains(n, "GH200") {
				return NVLink
			}
		}
	}
	return PCIe
}

// MFUFor is the utilisation of a request: mfu, DefaultMFU when 0. QLoRA's
// dequantization is timed on its own (Time.Dequant), not folded in here.
func MFUFor(mfu float64, r estimate.Request) float64 {
	if mfu <= 0 {
		mfu = DefaultMFU
	}
	return mfu
}

// Hardware is what the time of a step depends on besides the request.
type Hardware struct {
	// PeakTFLOPs is one GPU's dense 16-bit peak; 0: unknown (no time).
	PeakTFLOPs float64
	// MemBytesPerSec is one GPU's peak memory bandwidth; 0: unknown (QLoRA's
	// dequantization is then not timed, and HardwareFor says so).
	MemBytesPerSec float64
	// MFU is the model-FLOPs utilisation (0: DefaultMFU); MFUSource says
	// where it comes from.
	MFU       float64
	MFUSource string
	// Intra links the GPUs of a node, Inter the nodes, Host a GPU to its
	// host (CPU offload).
	Intra, Inter, Host Link
}

// Time is where one optimizer update's time goes, per GPU, in seconds, and
// what the run takes in all.
type Time struct {
	// Known is false when the GPU's peak is unknown; Why says so.
	Known bool
	Why   string
	// Compute is the forward and backward; Recompute what checkpointing
	// adds; Dequant QLoRA's dequantization of the 4-bit base (memory
	// traffic at the card's peak bandwidth); Communication the collectives'
	// time and CommExposed the part of it compute does not hide; Offload
	// the host traffic of CPU offload.
	Compute, Recompute, Dequant, Communication, CommExposed, Offload float64
	// Step is one optimizer update: Compute + Recompute + Dequant +
	// CommExposed + Offload.
	Step float64
	// Updates is the optimizer updates the goal takes; Total their time.
	Updates int64
	Total   float64
	// TokensPerSec is the whole run's throughput (all GPUs).
	TokensPerSec float64
	// MFU is the utilisation used.
	MFU float64
}

// layout is how a candidate spreads over GPUs.
type layout struct {
	world, perNode, nodes int64
	micro, accum          int64
}

// StepTime models one optimizer update of a normalized request laid out as
// l, with e its estimate (trainable parameters), f its FLOPs per token and
// params the model's parameters. Communication per update, from the
// nominal link bandwidth and the ring-collective costs of NCCL's
// performance notes (an all-gather or reduce-scatter of S bytes over n
// ranks moves S·(n−1)/n per rank, an all-reduce twice that):
//
//	ddp, fsdp_no_shard, zero1: one all-reduce of the gradients per update;
//	zero2: a reduce-scatter of the gradients per micro-batch and an
//	  all-gather of the updated parameters per update;
//	fsdp_shard_grad_op: an all-gather of the parameters per micro-batch, a
//	  reduce-scatter of the gradients per update (no_sync between);
//	zero3: two all-gathers of the parameters (forward, backward) and a
//	  reduce-scatter of the gradients per micro-batch;
//	fsdp_full_shard / hybrid: two all-gathers per micro-batch, one
//	  reduce-scatter per update; hybrid gathers within a node and all-reduces
//	  its shard of the gradients across nodes.
//
// Collectives overlap with compute (FSDP and ZeRO-3 prefetch, DDP's bucketed
// all-reduce during the backward): only what exceeds the compute time is
// exposed. CPU offload traffic crosses the host link and is not overlapped
// (the optimizer step waits for it); the CPU's own optimizer step is not
// modelled. So does the part of a paged optimizer's states that does not
// fit on the card beside the run: in for the step and out again.
func StepTime(hw Hardware, r estimate.Request, e *estimate.Estimate, f FLOPs, params int64, l layout) Time {
	var t Time
	if hw.PeakTFLOPs <= 0 {
		t.Why = "the GPU's dense 16-bit peak is unknown (no datasheet figure in the GPU table; --peak-tflops gives one)"
		return t
	}
	if r.Precision == estimate.FP32 {
		t.Why = "fp32 runs do not use the 16-bit Tensor Core peak the table holds"
		return t
	}
	t.Known = true
	t.MFU = MFUFor(hw.MFU, r)
	rate := hw.PeakTFLOPs * 1e12 * t.MFU
	tokensPerGPU := float64(l.micro*l.accum) * float64(r.SeqLen)
	t.Compute = tokensPerGPU * f.Train / rate
	t.Recompute = tokensPerGPU * f.Recompute / rate
	if hw.MemBytesPerSec > 0 {
		t.Dequant = float64(l.accum) * f.DequantBytes / hw.MemBytesPerSec
	}

	wBytes, gBytes := 2.0, 2.0
	if r.Method == estimate.QLoRA {
		wBytes = 0.5 + 2.0/64 // 4-bit weights and a 16-bit scale per block of 64 (QLoRA's blocksize)
	}
	p, tr := float64(params), float64(e.TrainableParams)
	n := float64(l.world)
	link := hw.Intra
	if l.nodes > 1 {
		link = hw.Inter
	}
	ring := func(bytes, ranks float64, lk Link) float64 {
		if ranks < 2 || lk.BytesPerSec <= 0 {
			return 0
		}
		return bytes * (ranks - 1) / ranks / lk.BytesPerSec
	}
	a := float64(l.accum)
	switch st := r.Sharding.Strategy; st {
	case "ddp", "fsdp_no_shard", "zero0", "zero1":
		t.Communication = 2 * ring(tr*gBytes, n, link)
	case "zero2":
		t.Communication = a*ring(tr*gBytes, n, link) + ring(tr*wBytes, n, link)
	case "fsdp_shard_grad_op":
		t.Communication = a*ring(p*wBytes, n, link) + ring(tr*gBytes, n, link)
	case "zero3":
		t.Communication = a * (2*ring(p*wBytes, n, link) + ring(tr*gBytes, n, link))
	case "fsdp_full_shard":
		t.Communication = a*2*ring(p*wBytes, n, link) + ring(tr*gBytes, n, link)
	case "fsdp_hybrid_shard":
		g := float64(l.perNode)
		t.Communication = a*2*ring(p*wBytes, g, hw.Intra) + ring(tr*gBytes, g, hw.Intra) + 2*ring(tr*gBytes/g, float64(l.nodes), hw.Inter)
	}
	compute := t.Compute + t.Recompute + t.Dequant
	t.CommExposed = math.Max(0, t.Communication-compute)

	shard := float64(max(r.Sharding.GPUs, 1))
	if hw.Host.BytesPerSec > 0 {
		off := string(r.Sharding.CPUOffload)
		if strings.Contains(off, "optimizer") {
			// Gradients go to the host, updated 16-bit weights come back.
			t.Offload += 2 * tr * gBytes / shard / hw.Host.BytesPerSec
		}
		if strings.HasPrefix(off, "params") {
			// The weights come in for the forward and again for the backward.
			t.Offload += a * 2 * p * wBytes / shard / hw.Host.BytesPerSec
		}
	}
	if b := e.Verdict.Budget; e.PagedOptimizer > 0 && b > 0 && hw.Host.BytesPerSec > 0 {
		// A paged optimizer's states that cannot stay on the card beside
		// the run are paged in for the step and out again, once per
		// update (estimate's paged.go).
		if over := min(e.PagedOptimizer, e.Total+e.PagedOptimizer-b); over > 0 {
			t.Offload += 2 * float64(over) / hw.Host.BytesPerSec
		}
	}
	t.Step = compute + t.CommExposed + t.Offload
	return t
}

// finish fills the run's totals: updates to cover the goal's tokens, their
// time, the throughput of all GPUs.
func (t *Time) finish(g Goal, r estimate.Request) {
	perUpdate := float64(g.EffectiveBatch) * float64(r.SeqLen)
	t.Updates = int64(math.Ceil(g.Tokens() / perUpdate))
	if !t.Known || t.Step <= 0 {
		return
	}
	t.Total = float64(t.Updates) * t.Step
	t.TokensPerSec = perUpdate / t.Step
}
