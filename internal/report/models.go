package report

import (
	"github.com/canifinetune/canifinetune/catalog"
	"github.com/canifinetune/canifinetune/hfconfig"
)

// ModelRow is one catalog entry as models --json lists it (a JSON array of
// rows): its shape, or why the parser does not support it.
type ModelRow struct {
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

// NewModels lists catalog entries with their parsed shapes.
func NewModels(entries []catalog.Entry) []ModelRow {
	var rows []ModelRow
	for _, e := range entries {
		row := ModelRow{ID: e.ID, Aliases: e.Aliases, Family: e.Family, Verbatim: e.Verbatim, Source: e.Source}
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
	return rows
}
