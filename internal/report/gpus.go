package report

import (
	"github.com/canifinetune/canifinetune/gpu"
	"github.com/canifinetune/canifinetune/internal/bytesize"
)

// GPUsSchema names the JSON layout; it changes only with a new version.
const GPUsSchema = "canifinetune.gpus/v1"

// GPUs is the document of the embedded GPU table (gpus --json).
type GPUs struct {
	Schema string `json:"schema"`
	GPUs   []Card `json:"gpus"`
}

// Card is one row of the GPU table.
type Card struct {
	Name              string   `json:"name"`
	Aliases           []string `json:"aliases"`
	Families          []string `json:"families"`
	Vendor            string   `json:"vendor"`
	Arch              string   `json:"arch"`
	MemoryMiB         int64    `json:"memory_mib"`
	MemoryBytes       int64    `json:"memory_bytes"`
	MemoryGB          float64  `json:"memory_gb"`
	ComputeCapability string   `json:"compute_capability"`
	BF16              bool     `json:"bf16"`
	Nominal           bool     `json:"nominal"`
	Source            string   `json:"source"`
}

func newCard(c gpu.Card) Card {
	aliases, families := c.Aliases, c.Families
	if aliases == nil {
		aliases = []string{}
	}
	if families == nil {
		families = []string{}
	}
	return Card{
		Name: c.Name, Aliases: aliases, Families: families, Vendor: c.Vendor, Arch: c.Arch,
		MemoryMiB: c.MemoryMiB, MemoryBytes: c.MemoryBytes(), MemoryGB: bytesize.InGiB(c.MemoryBytes()),
		ComputeCapability: c.ComputeCapability, BF16: c.BF16, Nominal: c.Nominal, Source: c.Source,
	}
}

// NewGPUs is the document of a GPU table, in its order.
func NewGPUs(cards []gpu.Card) GPUs {
	out := GPUs{Schema: GPUsSchema}
	for _, card := range cards {
		out.GPUs = append(out.GPUs, newCard(card))
	}
	return out
}
