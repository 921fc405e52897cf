package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/canifinetune/canifinetune/catalog"
	"github.com/canifinetune/canifinetune/hfconfig"
)

// ModelsCmd is `canifinetune models`.
type ModelsCmd struct {
	JSON bool `help:"Print JSON."`
}

type modelRowJSON struct {
	ID        string   `json:"id"`
	Aliases   []string `json:"aliases"`
	Family    string   `json:"family"`
	ModelType string   `json:"model_type"`
	Params    int64    `json:"params"`
	Layers    int64    `json:"layers"`
	Hidden    int64    `json:"hidden_size"`
	Vocab     int64    `json:"vocab_size"`
	Experts   int64    `json:"experts,omitempty"`
	Verbatim  bool     `json:"verbatim_config"`
	Source    string   `json:"source"`
	Error     string   `json:"unsupported,omitempty"`
}

// Run implements the command.
func (c *ModelsCmd) Run(env *Env) error {
	var rows []modelRowJSON
	for _, e := range catalog.All() {
		row := modelRowJSON{ID: e.ID, Aliases: e.Aliases, Family: e.Family, Verbatim: e.Verbatim, Source: e.Source}
		if row.Aliases == nil {
			row.Aliases = []string{}
		}
		m, err := hfconfig.Parse(e.Config)
		if err != nil {
			row.Error = err.Error()
		} else {
			row.ModelType, row.Params, row.Layers, row.Hidden, row.Vocab, row.Experts = m.ModelType, m.Params(), m.NumLayers, m.Hidden, m.Vocab, m.Experts
		}
		rows = append(rows, row)
	}
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
