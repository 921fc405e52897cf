package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/canifinetune/canifinetune/catalog"
	"github.com/canifinetune/canifinetune/internal/report"
)

// ModelsCmd is `canifinetune models`.
type ModelsCmd struct {
	JSON bool `help:"Print JSON."`
}

// Run implements the command.
func (c *ModelsCmd) Run(env *Env) error {
	rows := report.NewModels(catalog.All())
	if c.JSON {
		return writeJSON(env.Stdout, rows)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tTYPE\tPARAMS\tLAYERS\tHIDDEN\tVOCAB\tALIASES")
	for _, r := range rows {
		if r.Error != "" {
			fmt.Fprintf(tw, "%s\t-\tunsupported\t\t\t\t%s\n", r.ID, r.Error)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\n", r.ID, r.ModelType, humanCount(r.Params), r.Layers, r.Hidden, r.Vocab, len(r.Aliases))
	}
	return tw.Flush()
}
