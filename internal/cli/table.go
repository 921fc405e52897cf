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
	// spans holds, by row index, text printed as is after that row, outside
	// the columns: a long note would otherwise widen its column for every row.
	spans map[int]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

// span prints text (one or more lines) under the last row added.
func (t *table) span(text string) {
	if t.spans == nil {
		t.spans = map[int]string{}
	}
	t.spans[len(t.rows)-1] += text
}

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
	for ri, r := range t.rows {
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
		b.WriteString(t.spans[ri])
	}
	_, err := io.WriteString(w, b.String())
	return err
}
