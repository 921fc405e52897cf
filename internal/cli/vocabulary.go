package cli

import (
	"fmt"
	"strings"

	"github.com/alecthomas/kong"
	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/evidence"
)

// vocabularyVars are the kong variables the request flags' tags read, built
// from estimate's option tables so that a value added there is a flag value,
// a completion and a help line here, with nothing typed twice. For each
// option NAME (estimate.Options):
//
//	${NAME_enum}    every accepted spelling, aliases included (kong's enum:)
//	${NAME_values}  one help line per value: "name: what it is"
func vocabularyVars() kong.Vars {
	vars := kong.Vars{}
	for _, o := range estimate.Options() {
		vars[o.Name+"_enum"] = strings.Join(enumOf(o), ",")
		vars[o.Name+"_values"] = valuesHelp(o.Choices)
	}
	var sets []estimate.Choice
	for _, name := range evidence.Histograms() {
		sets = append(sets, estimate.Choice{Name: name, Help: evidence.HistogramSummary(name)})
	}
	vars["seq_len_dataset_enum"] = strings.Join(evidence.Histograms(), ",")
	vars["seq_len_dataset_values"] = valuesHelp(sets)
	return vars
}

// enumOf is every spelling an option accepts, in table order, each value
// followed by its aliases.
func enumOf(o estimate.Option) []string {
	var names []string
	for _, c := range o.Choices {
		names = append(names, c.Name)
		names = append(names, c.Aliases...)
	}
	return names
}

// valuesHelp lists the values as a list of the help text (go/doc list
// syntax, which kong wraps and indents).
func valuesHelp(cs []estimate.Choice) string {
	var b strings.Builder
	b.WriteString("\n\n")
	for _, c := range cs {
		name := c.Name
		if len(c.Aliases) > 0 {
			name += " (or " + strings.Join(c.Aliases, ", ") + ")"
		}
		fmt.Fprintf(&b, "  - %s: %s\n", name, c.Help)
	}
	return b.String()
}

// flagOr is a request flag's value, or def when the flag was not given.
func flagOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// flagValue is a request flag's value, or the zero value (not given: the
// stack's or the request's default applies).
func flagValue[T any](p *T) T {
	var zero T
	return flagOr(p, zero)
}
