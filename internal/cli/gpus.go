package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/canifinetune/canifinetune/gpu"
	"github.com/canifinetune/canifinetune/internal/bytesize"
	"github.com/canifinetune/canifinetune/internal/report"
)

// GPUsCmd prints the embedded GPU table.
//
// With --json it prints, schema "canifinetune.gpus/v1":
//
//	{
//	  "schema": "canifinetune.gpus/v1",
//	  "gpus": [{
//	    "name": "NVIDIA GeForce RTX 4090",   // as the driver reports it
//	    "aliases": ["rtx-4090", "4090"],     // names --gpu accepts besides name
//	    "families": [],                      // names shared with sibling rows ("a100"): ambiguous, refused
//	    "vendor": "nvidia",                  // "nvidia" | "amd"
//	    "arch": "Ada Lovelace",
//	    "memory_mib": 24564,                 // as the driver reports it
//	    "memory_bytes": 25757220864,         // memory_mib × 2^20
//	    "memory_gb": 23.98828125,            // GiB: memory_bytes / 2^30
//	    "compute_capability": "8.9",         // CUDA CC, or the gfx target on AMD
//	    "bf16": true,
//	    "nominal": false,                    // true: no driver reading found, documented capacity
//	    "source": "NVIDIA GeForce RTX 4090 specifications page: 24 GB GDDR6X; memory_mib: nvidia-smi memory.total reading …"
//	  }, …]
//	}
type GPUsCmd struct {
	JSON bool `help:"Print the table as JSON (schema canifinetune.gpus/v1; sizes in bytes, *_gb in GiB)."`
}

// Run prints the table.
func (c *GPUsCmd) Run(env *Env) error {
	cards := gpu.Cards()
	if c.JSON {
		return writeJSON(env.Stdout, report.NewGPUs(cards))
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMiB\tGiB\tARCH\tVENDOR\tBF16\tMEMORY\tALSO")
	for _, card := range cards {
		marker := "reading"
		if card.Nominal {
			marker = "nominal"
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%s\t%s\t%s\t%s\t%s\n", card.Name, card.MemoryMiB, bytesize.InGiB(card.MemoryBytes()),
			card.Arch, card.Vendor, yesNo(card.BF16), marker, strings.Join(card.Aliases, ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout, "\nMiB as the driver reports it (nvidia-smi memory.total, rocm-smi VRAM total);")
	fmt.Fprintln(env.Stdout, "\"nominal\": no reading was found, the documented capacity is used. --json shows each row's source.")
	fmt.Fprintln(env.Stdout, "Names match whole (case, spaces and dashes aside); a name several rows share, such as a100, is refused: name the row.")
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
