package placement

import (
	"fmt"
	"slices"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/gpu"
	"github.com/canifinetune/canifinetune/internal/bytesize"
)

// Budget sources, the stable values of estimate --json's gpu.budget_source.
const (
	BudgetDetectedFree = "detected free memory"
	BudgetGivenFree    = "--available-vram-gb"
	BudgetCardTotal    = "card total"
)

// Setup is what the choice of GPUs decided: which card's memory the per-GPU
// verdict is measured against, which GPUs a model-parallel placement may
// use, and the data-parallel world. The On* functions build it from plain
// values (a table card, a card list, detected devices); the caller detects
// the devices and reads the flags.
type Setup struct {
	// Card is the table row of the budget card (nil for a card given only
	// by its memory, or a detected card not in the table); Name is what
	// output calls it.
	Card *gpu.Card
	Name string
	// Detected: the budget card is a detected device, Index its index (-1
	// otherwise).
	Detected bool
	Index    int
	// BudgetSource is one of the Budget* constants ("" without a budget).
	BudgetSource string
	// Total sizes the overhead allowances; Available is what the verdict
	// compares with (0: Total). Both are the request's GPUTotal and Available.
	Total, Available int64
	// Devices are the GPUs a model-parallel placement may use: the detected
	// ones, or the cards of a list (free memory = what is available).
	Devices []gpu.Device
	// Explicit are the device indices the user named (--gpus 0,2).
	Explicit []int
	// Listed is the number of GPUs a list names (0 without one).
	Listed int
	// PerNode and World are the data-parallel GPUs per node and in all, and
	// ShardingGPUs is the request's Sharding.GPUs (SizeWorld sets them).
	PerNode, World, ShardingGPUs int64
	// Notes say what was decided and assumed, for the reader.
	Notes []string

	// mostFree is the note naming the most-free detected GPU, dropped when
	// a data-parallel run is bounded by another.
	mostFree string
}

// BudgetError is free memory given above the card's total.
type BudgetError struct {
	Available, Total int64
	// Of names the card: "the card", "detected GPU 0", the smallest card's
	// name of a list.
	Of string
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("free memory %.2f GiB exceeds %s's %.2f GiB", bytesize.InGiB(e.Available), e.Of, bytesize.InGiB(e.Total))
}

// NoReadingError is a detected device that reports no memory, chosen as the
// budget card.
type NoReadingError struct {
	Index int
	Name  string
}

func (e *NoReadingError) Error() string {
	return fmt.Sprintf("GPU %d (%s): the driver reports no memory reading", e.Index, e.Name)
}

// IndexError is a list of device indices the detected devices cannot
// honour (an index not on the machine, a MIG device).
type IndexError struct{ Err error }

func (e *IndexError) Error() string { return e.Err.Error() }
func (e *IndexError) Unwrap() error { return e.Err }

// OnCard is one card: a table row (card, Total its memory) or only its
// memory (card nil). available is the free memory (0: the total).
func OnCard(card *gpu.Card, total, available int64) (Setup, error) {
	s := Setup{Card: card, Index: -1, Total: total, BudgetSource: BudgetCardTotal}
	if card != nil {
		s.Name = card.Name
	}
	if available > 0 {
		if available > total {
			return s, &BudgetError{available, total, "the card"}
		}
		s.Available, s.BudgetSource = available, BudgetGivenFree
	}
	return s, nil
}

// OnCardList is a list of cards by name (4xA100-80GB, 2xH100,1x4090): the
// smallest bounds a data-parallel run, and the cards stand in for devices,
// numbered by their position in the list, so that placement works the
// same on a plan as on a machine. available (0: each card's total) is the
// free memory of each.
func OnCardList(specs []gpu.GPUSpec, available int64) (Setup, error) {
	if len(specs) == 0 {
		return Setup{Index: -1}, gpu.ErrNoGPU
	}
	small := specs[0].Card
	kinds := map[string]bool{}
	for _, sp := range specs {
		kinds[sp.Card.Name] = true
		if sp.Card.MemoryMiB < small.MemoryMiB {
			small = sp.Card
		}
	}
	s := Setup{Card: &small, Name: small.Name, Index: -1, Total: small.MemoryBytes(), BudgetSource: BudgetCardTotal, Listed: gpu.TotalGPUs(specs)}
	if available > 0 {
		if available > s.Total {
			return s, &BudgetError{available, s.Total, small.Name}
		}
		s.Available, s.BudgetSource = available, BudgetGivenFree
	}
	i := 0
	for _, sp := range specs {
		for range sp.Count {
			free := sp.Card.MemoryMiB
			if available > 0 {
				free = min(free, available/gpu.MiB)
			}
			card := sp.Card
			s.Devices = append(s.Devices, gpu.Device{Index: i, Name: card.Name, TotalMiB: card.MemoryMiB, FreeMiB: free, UsedMiB: card.MemoryMiB - free, Card: &card})
			i++
		}
	}
	if len(kinds) > 1 {
		s.Notes = append(s.Notes, fmt.Sprintf("heterogeneous GPUs: the smallest, %s (%.2f GiB), bounds a data-parallel run — every rank holds the same per-GPU state and the others wait for it", small.Name, bytesize.InGiB(s.Total)))
	}
	return s, nil
}

// OnDetected is this machine's GPUs, none named: the one with the most free
// memory is the budget card. The verdict compares with the memory free now,
// while overhead allowances are sized from the card's total. available, when
// above 0, replaces the measured free memory. Devices no process can plan
// for (MIG, no memory reading) leave the Setup without a budget, with notes
// that say why.
func OnDetected(devices []gpu.Device, available int64) (Setup, error) {
	s := Setup{Index: -1, Devices: devices}
	inv := gpu.Inventory{GPUs: devices}
	d, ok := inv.MostFree()
	if !ok {
		for _, g := range devices {
			switch {
			case g.MIG:
				s.Notes = append(s.Notes, fmt.Sprintf("GPU %d (%s) has MIG enabled: no process sees the whole card; pass the memory of your MIG instance as --gpu-vram-gb (e.g. 40 for a 3g.40gb slice)", g.Index, g.Name))
			default:
				s.Notes = append(s.Notes, fmt.Sprintf("GPU %d (%s) reports no free memory reading: pass --gpu-vram-gb and --available-vram-gb (see canifinetune doctor)", g.Index, g.Name))
			}
		}
		s.Notes = append(s.Notes, "no detected GPU can be planned for: no verdict")
		return s, nil
	}
	if err := s.useDevice(d, BudgetDetectedFree); err != nil {
		return s, err
	}
	if available > 0 {
		if available > s.Total {
			return s, &BudgetError{available, s.Total, fmt.Sprintf("detected GPU %d", d.Index)}
		}
		s.Available, s.BudgetSource = available, BudgetGivenFree
	}
	if n := len(devices); n > 1 {
		s.mostFree = fmt.Sprintf("GPU %d has the most free memory of the %d detected", d.Index, n)
		s.Notes = append(s.Notes, s.mostFree)
	}
	for _, g := range devices {
		if g.MIG {
			s.Notes = append(s.Notes, fmt.Sprintf("GPU %d (%s) has MIG enabled and is not planned for: no process sees the whole card", g.Index, g.Name))
		}
	}
	return s, nil
}

// OnIndices is detected GPUs named by index (--gpus 0,2), validated
// against the devices (an *IndexError when they cannot be used). Every rank
// of a data-parallel run holds the same state, so the named GPU with the
// least free memory is the budget card.
func OnIndices(devices []gpu.Device, idx []int) (Setup, error) {
	s := Setup{Index: -1}
	if len(idx) == 0 {
		return s, &IndexError{gpu.ErrNoGPU}
	}
	if _, err := gpu.SelectExplicit(idx, 0, devices); err != nil {
		return s, &IndexError{err}
	}
	inv := gpu.Inventory{GPUs: devices}
	s.Devices, s.Explicit, s.Listed = devices, idx, len(idx)
	bound, _ := inv.Device(idx[0])
	for _, i := range idx[1:] {
		if d, _ := inv.Device(i); d.FreeMiB < bound.FreeMiB {
			bound = d
		}
	}
	if err := s.useDevice(bound, BudgetDetectedFree); err != nil {
		return s, err
	}
	if len(idx) > 1 {
		s.Notes = append(s.Notes, fmt.Sprintf("GPU %d has the least free memory of --gpus %s: the verdict per GPU is measured against it", bound.Index, joinInts(idx)))
	}
	return s, nil
}

// useDevice makes d the budget card: its free memory is the budget, its
// total sizes the overheads.
func (s *Setup) useDevice(d gpu.Device, source string) error {
	total, free := d.TotalBytes(), d.FreeBytes()
	if total <= 0 && d.Card != nil {
		total = d.Card.MemoryBytes()
	}
	if total <= 0 || free < 0 {
		return &NoReadingError{d.Index, d.Name}
	}
	s.Total, s.Available = total, min(free, total)
	if s.Available == 0 {
		// A full card has no budget at all; 0 would read as "not given".
		s.Available = 1
	}
	s.Card, s.Name, s.Detected, s.Index, s.BudgetSource = d.Card, d.Name, true, d.Index, source
	return nil
}

// WorldError is a data-parallel world that cannot be: its Reason, with the
// numbers that make it so.
type WorldError struct {
	Reason   WorldReason
	Strategy estimate.Strategy
	// PerNode is the GPUs per node asked for (0: not given), Listed the GPUs
	// a list names, Nodes the nodes, World their product (when it exists).
	PerNode, Nodes, World int64
	Listed                int
}

// WorldReason is why a world cannot be.
type WorldReason int

const (
	// NodesWithoutDataParallel: several nodes with no data-parallel
	// strategy, under which every GPU holds the whole run.
	NodesWithoutDataParallel WorldReason = iota + 1
	// PerNodeDisagrees: the GPUs per node asked for differ from the GPUs a
	// list names.
	PerNodeDisagrees
	// TooFewGPUs: a data-parallel strategy on fewer than 2 GPUs in all.
	TooFewGPUs
	// TooManyGPUs: GPUs per node × nodes beyond estimate.MaxGPUs (or beyond
	// int64: refused, not wrapped around).
	TooManyGPUs
)

func (e *WorldError) Error() string {
	switch e.Reason {
	case NodesWithoutDataParallel:
		return fmt.Sprintf("%d nodes need a data-parallel strategy: without one every GPU holds the whole run", e.Nodes)
	case PerNodeDisagrees:
		return fmt.Sprintf("%d GPUs per node and a list of %d GPUs disagree", e.PerNode, e.Listed)
	case TooFewGPUs:
		return fmt.Sprintf("strategy %s needs at least 2 GPUs in all; have %d", e.Strategy, e.World)
	}
	return fmt.Sprintf("%d GPUs per node × %d nodes is a world size beyond %d GPUs", e.PerNode, e.Nodes, estimate.MaxGPUs)
}

// SizeWorld sets the data-parallel world of strategy st: perNode GPUs per
// node (0: as many as a list names, or for a sharded run on detected GPUs,
// those of them that can be used) times nodes. fsdp_hybrid_shard shards
// within a node and replicates across nodes, so its shard group is one
// node's GPUs. A sharded run on detected GPUs is bounded by the one with the
// least free memory among the ranks, which becomes the budget card.
func (s *Setup) SizeWorld(st estimate.Strategy, perNode, nodes int64) error {
	sharded := st.Spec().DataParallel
	asked := perNode
	if !sharded && nodes > 1 {
		return &WorldError{Reason: NodesWithoutDataParallel, Strategy: st, Nodes: nodes}
	}
	onDetected := s.Detected && len(s.Explicit) == 0 && s.Listed == 0
	switch {
	case s.Listed > 0 && perNode > 0 && perNode != int64(s.Listed):
		return &WorldError{Reason: PerNodeDisagrees, Strategy: st, PerNode: perNode, Listed: s.Listed, Nodes: nodes}
	case s.Listed > 0 && sharded:
		perNode = int64(s.Listed)
	case sharded && onDetected && perNode <= estimate.MaxGPUs:
		if err := s.dataParallelOnDetected(perNode); err != nil {
			return err
		}
		perNode = s.PerNode
	}
	perNode = max(perNode, 1)
	if perNode > estimate.MaxGPUs || nodes > estimate.MaxGPUs/perNode {
		return &WorldError{Reason: TooManyGPUs, Strategy: st, PerNode: perNode, Nodes: nodes}
	}
	s.PerNode, s.World = perNode, perNode*nodes
	if sharded && s.World < 2 {
		return &WorldError{Reason: TooFewGPUs, Strategy: st, PerNode: perNode, Nodes: nodes, World: s.World}
	}
	switch {
	case st.Spec().PerNode:
		s.ShardingGPUs = perNode
	case sharded:
		s.ShardingGPUs = s.World
	case asked > 0:
		// GPUs per node without a strategy: replicas, said so by the estimator.
		s.ShardingGPUs = asked
	default:
		s.ShardingGPUs = 1
	}
	if sharded && nodes > 1 && s.Detected {
		s.Notes = append(s.Notes, fmt.Sprintf("the other %d nodes are assumed to match this one", nodes-1))
	}
	return nil
}

// dataParallelOnDetected plans a sharded run on the detected GPUs: the n
// with the most free memory (all eligible when n is 0); the one with the
// least free among them bounds every rank.
func (s *Setup) dataParallelOnDetected(n int64) error {
	use, usable := DataParallelRanks(s.Devices, int(n))
	if n == 0 {
		n = int64(usable)
	}
	s.PerNode = n
	if n < 2 || usable == 0 {
		return nil
	}
	bound := use[len(use)-1]
	if err := s.useDevice(bound, BudgetDetectedFree); err != nil {
		return err
	}
	var idx []int
	for _, d := range use {
		idx = append(idx, d.Index)
	}
	slices.Sort(idx)
	// The most-free note of OnDetected no longer names the budget card.
	if s.mostFree != "" {
		s.Notes = slices.DeleteFunc(s.Notes, func(n string) bool { return n == s.mostFree })
	}
	msg := fmt.Sprintf("data-parallel over detected GPUs %s: GPU %d has the least free memory and bounds every rank", joinInts(idx), bound.Index)
	if others := slices.DeleteFunc(slices.Clone(idx), func(i int) bool { return i == bound.Index }); len(others) >= 2 {
		msg += fmt.Sprintf(" (--gpus %s leaves it out)", joinInts(others))
	}
	if int(n) > usable {
		msg = fmt.Sprintf("%d GPUs asked for, %d detected can be used: the others are assumed to match GPU %d", n, usable, bound.Index)
	}
	s.Notes = append(s.Notes, msg)
	return nil
}

// NodeGPUs is the GPUs of one node a plan may use: as many as a list
// names, else the detected GPUs that can be used (not MIG, with a memory
// reading), else 1. With nodes above 1 on detected GPUs it notes that the
// other nodes are assumed to match this one.
func (s *Setup) NodeGPUs(nodes int64) int64 {
	n := int64(1)
	switch {
	case s.Listed > 0:
		n = int64(s.Listed)
	case s.Detected:
		var k int64
		for _, d := range s.Devices {
			if !d.MIG && d.TotalMiB > 0 {
				k++
			}
		}
		n = max(k, 1)
	}
	if nodes > 1 && s.Detected {
		s.Notes = append(s.Notes, fmt.Sprintf("the other %d nodes are assumed to match this one", nodes-1))
	}
	return n
}

// Cards are the table rows of the run's GPUs: the budget card, then every
// device's that the table knows.
func (s Setup) Cards() []*gpu.Card {
	var out []*gpu.Card
	if s.Card != nil {
		out = append(out, s.Card)
	}
	for _, d := range s.Devices {
		if d.Card != nil {
			out = append(out, d.Card)
		}
	}
	return out
}

// Features is what the run's GPUs can execute, from the GPU table: the
// budget card and every device a list or the detection holds. The first
// card without native bf16 or without FlashAttention-2 names the set; nil
// when no card is in the table.
func (s Setup) Features() *estimate.CardFeatures {
	var f *estimate.CardFeatures
	for _, k := range s.Cards() {
		if f == nil {
			f = &estimate.CardFeatures{Name: k.Name, BF16: true, FlashAttention2: true}
		}
		if !k.BF16 && f.BF16 {
			f.BF16, f.Name = false, k.Name
		}
		if !k.FlashAttention2() && f.FlashAttention2 {
			f.FlashAttention2, f.Name = false, k.Name
		}
	}
	return f
}

// Apply puts the setup into the request: the budget card's memory, the
// data-parallel GPUs (when SizeWorld ran) and what the cards can execute.
func (s Setup) Apply(r *estimate.Request) {
	r.GPUTotal, r.Available = s.Total, s.Available
	if s.ShardingGPUs > 0 {
		r.Sharding.GPUs = s.ShardingGPUs
	}
	r.Card = s.Features()
}

// GPUs is what placement.Evaluate takes: the devices, the named ones, the
// data-parallel world and the rule of the estimator.
func (s Setup) GPUs(estimator string, nodes int64) GPUs {
	return GPUs{Devices: s.Devices, Explicit: s.Explicit, Positional: !s.Detected, Detected: s.Detected,
		GPUsPerNode: s.PerNode, Nodes: nodes, Rule: RuleFor(estimator)}
}
