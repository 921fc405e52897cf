package cli

import (
	"io"
	"strings"
	"unicode/utf8"
)

// table is a text table whose columns each align left ('l') or right ('r'):
// labels and ids read best left-aligned, numbers right-aligned, which
// text/tabwriter cannot mix in one table.
type table struct {
	align string // one byte per column; missing columns align left
	rows  [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

// write pads every cell to its column's widest (in runes: "–" and "→" are one
// column on a terminal) with two spaces between columns and no trailing blanks.
func (t *table) write(w io.Writer, indent string) error {
	var width []int
	for _, r := range t.rows {
		for i, c := range r {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, r := range t.rows {
		line := indent
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i > 0 {
				line += "  "
			}
			if i < len(t.align) && t.align[i] == 'r' {
				line += pad + c
			} else {
				line += c + pad
			}
		}
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
