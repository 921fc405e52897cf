package web

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"unicode/utf8"

	"github.com/canifinetune/canifinetune/catalog"
	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/evidence"
	"github.com/canifinetune/canifinetune/gpu"
	"github.com/canifinetune/canifinetune/internal/bytesize"
	"github.com/canifinetune/canifinetune/internal/report"
)

// view is what the page's template renders.
type view struct {
	Params     Params
	Query      template.URL
	Controls   []control
	Models     []string
	GPUs       []choice
	Estimators []choice
	// Datasets are the kept length histograms (--seq-len-dataset).
	Datasets []choice
	Result   *report.Estimate
	Bar      *bar
	Errors   []ErrorSlice
	Problem  *Problem
	Yes      float64
	Marginal float64
	// Hub says where ids beyond the catalog come from.
	Hub HubState
	// Keep are the view's parameters but the model (Label the name), which
	// the config upload form carries to the view it redirects to.
	Keep []choice
	// MaxConfig is the upload limit of a config.json, in words.
	MaxConfig string
	// DefaultEstimator is the estimator the held-out figures are for.
	DefaultEstimator string
}

// control is one select of the form, its options generated from estimate's
// option tables as the CLI's flag values are.
type control struct {
	Param, Label string
	Choices      []choice
}

type choice struct {
	Value, Label, Help string
}

// formControls are the selects, in form order, with the option each reads.
var formControls = []struct{ param, label, option string }{
	{"method", "method", "method"},
	{"quant", "QLoRA quantization", "quant"},
	{"grad-ckpt", "activation checkpointing", "grad_ckpt"},
	{"attn", "attention", "attn"},
	{"fused-ce", "loss kernel", "fused_ce"},
	{"optimizer", "optimizer", "optimizer"},
	{"stack", "stack", "stack"},
	{"precision", "precision", "precision"},
}

func controls() []control {
	var cs []control
	for _, f := range formControls {
		c := control{Param: f.param, Label: f.label}
		if f.param != "method" {
			c.Choices = append(c.Choices, choice{Value: "", Label: "default", Help: "the CLI's default, or the stack's"})
		}
		for _, o := range estimate.Options() {
			if o.Name == f.option {
				for _, ch := range o.Choices {
					c.Choices = append(c.Choices, choice{Value: ch.Name, Label: ch.Name, Help: ch.Help})
				}
			}
		}
		cs = append(cs, c)
		if f.param == "stack" {
			cs = append(cs, freesLogitsControl)
		}
	}
	return cs
}

// freesLogitsControl is the CLI's --frees-logits: whether a loop that
// computes its own loss (the pytorch stack) keeps the model's output
// through the backward.
var freesLogitsControl = control{Param: "frees-logits", Label: "own loss's logits", Choices: []choice{
	{Value: "", Label: "held (inline loop)", Help: "the loop keeps the model's output referenced through the backward and the optimizer step (the pytorch stack's default)"},
	{Value: "true", Label: "freed", Help: "a loss function that returns only the loss, or del logits, before loss.backward() (pytorch stack only)"},
}}

// datasetChoices are the lengths select's options: the sequence length
// alone (packed or padded to it), or a kept dataset's histogram.
func datasetChoices() []choice {
	cs := []choice{{Value: "", Label: "every sequence at its length", Help: "packed, or padded to the sequence length"}}
	for _, name := range evidence.Histograms() {
		cs = append(cs, choice{Value: name, Label: name, Help: evidence.HistogramSummary(name)})
	}
	return cs
}

func gpuChoices() []choice {
	cs := []choice{{Value: "", Label: "none (no verdict)"}}
	for _, k := range gpu.Cards() {
		v := k.Name
		if len(k.Aliases) > 0 {
			v = k.Aliases[0]
		}
		cs = append(cs, choice{Value: v, Label: fmt.Sprintf("%s (%.1f GiB)", k.Name, bytesize.InGiB(k.MemoryBytes()))})
	}
	return cs
}

func modelIDs() []string {
	var ids []string
	for _, e := range catalog.All() {
		ids = append(ids, e.ID)
	}
	return ids
}

// bar is the stacked SVG bar: one segment per non-zero component, scaled so
// that the larger of the total and the budget spans the width, with the
// verdict's thresholds marked on the budget.
type bar struct {
	Width, Height float64
	// ViewHeight is the SVG's height: the bar, then the marks' label rows.
	ViewHeight float64
	Segments   []segment
	Marks      []mark
}

type segment struct {
	X, W    float64
	Class   string
	Name    string
	Title   string
	Percent float64
	// Label is what fits inside the segment ("weights 18 %", or "18 %", or
	// nothing), centred at LabelX; the title carries everything on hover.
	Label  string
	LabelX float64
}

type mark struct {
	X, Y  float64
	Label string
}

const (
	barWidth = 1000
	// charW is the advance of one character of the bar's 12px labels,
	// generous for a sans-serif font: a label is drawn only where it fits.
	charW = 7.0
	// labelPad is the room a label leaves on each side within its segment.
	labelPad = 4.0
	// markRowH is the height of one row of mark labels under the bar.
	markRowH = 14.0
	// markGap is the room between a mark's line and its label, and between
	// two labels of one row.
	markGap = 4.0
)

// textW is the width a label of s takes at the bar's font size.
func textW(s string) float64 { return charW * float64(utf8.RuneCountInString(s)) }

// segmentLabel is the longest of the name with its share, or the share
// alone, that fits in a segment w wide; "" when neither does.
func segmentLabel(name string, pct, w float64) string {
	for _, l := range []string{fmt.Sprintf("%s %.0f %%", name, pct), fmt.Sprintf("%.0f %%", pct)} {
		if textW(l)+2*labelPad <= w {
			return l
		}
	}
	return ""
}

// markY is the baseline of a mark label in row (0 the first under the bar).
func markY(barH float64, row int) float64 { return barH + 8 + markRowH*float64(row+1) }

// labelFits: a label spanning [left, its mark] in row clears the row's
// last label, which ends at end, and every line of a mark whose label is
// lower down (a line crosses every row above its label).
func (b *bar) labelFits(row int, left, end float64) bool {
	if left < end+markGap {
		return false
	}
	for _, m := range b.Marks {
		if m.Y > markY(b.Height, row) && m.X >= left-markGap {
			return false
		}
	}
	return true
}

func newBar(o *report.Estimate) *bar {
	scale := float64(o.TotalBytes)
	budget := o.Verdict.BudgetBytes
	if float64(budget) > scale {
		scale = float64(budget)
	}
	if scale <= 0 {
		return nil
	}
	b := &bar{Width: barWidth, Height: 48}
	x := 0.0
	for _, c := range o.Components {
		if c.Bytes <= 0 {
			continue
		}
		w := float64(c.Bytes) / scale * barWidth
		b.Segments = append(b.Segments, segment{X: x, W: w, Class: "c-" + c.Name, Name: c.Name, Percent: 100 * c.Share,
			Title: fmt.Sprintf("%s: %.2f GiB (%.1f %% of the total) — %s", c.Name, c.GB, 100*c.Share, c.Source),
			Label: segmentLabel(c.Name, 100*c.Share, w), LabelX: x + w/2})
		x += w
	}
	rows := 1
	if budget > 0 {
		// Each label ends at its mark and its line runs down to it. Left
		// to right, a label takes the first row where it clears the label
		// before it in that row and the lines of the marks placed in rows
		// below (85 %, 97 % and 100 % are close on a wide bar).
		var ends []float64 // per row, the mark its last label ends at
		for _, m := range []struct {
			f     float64
			label string
		}{{estimate.YesRatio, "yes ≤ 85 %"}, {estimate.MarginalRatio, "marginal ≤ 97 %"}, {1, "budget"}} {
			mx := m.f * float64(budget) / scale * barWidth
			left := mx - textW(m.label) - markGap
			row := 0
			for row < len(ends) && !b.labelFits(row, left, ends[row]) {
				row++
			}
			if row == len(ends) {
				ends = append(ends, mx)
			} else {
				ends[row] = mx
			}
			b.Marks = append(b.Marks, mark{X: mx, Y: markY(b.Height, row), Label: m.label})
		}
		rows = len(ends)
	}
	b.ViewHeight = b.Height + 8 + markRowH*float64(rows) + 6
	return b
}

func (s *Server) handlePage(w http.ResponseWriter, r *http.Request) {
	if !getOnly(w, r) {
		return
	}
	p, pr := ParseQuery(r.URL.Query())
	if p == nil {
		p = Params{}
	}
	s.renderPage(w, r, p, pr)
}

// renderPage renders the calculator for p, or with the problem pr.
func (s *Server) renderPage(w http.ResponseWriter, r *http.Request, p Params, pr *Problem) {
	v := s.form
	v.Hub = s.hubState()
	v.DefaultEstimator = estimate.Default
	status := http.StatusOK
	if pr == nil && p["model"] != "" {
		v.Result, pr = s.estimate(r.Context(), p)
	}
	if pr != nil {
		v.Problem, status = pr, pr.Status
	}
	// Query is url.Values.Encode's output: every byte is escaped already.
	v.Params, v.Query = p, template.URL(p.Query())
	for _, k := range paramNames {
		if k != "model" && p[k] != "" {
			v.Keep = append(v.Keep, choice{Value: p[k], Label: k})
		}
	}
	if v.Result != nil {
		v.Bar = newBar(v.Result)
		v.Errors = s.measured.slices(v.Result.Estimator.Name, v.Result.Config.Method, v.Result.Model.ID)
	}
	var buf bytes.Buffer
	if err := s.page.ExecuteTemplate(&buf, "index.html", v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

var funcs = template.FuncMap{
	"pct":    func(f float64) string { return fmt.Sprintf("%.1f %%", 100*f) },
	"gib":    func(f float64) string { return fmt.Sprintf("%.2f", f) },
	"f1":     func(f float64) string { return fmt.Sprintf("%.1f", f) },
	"div1e9": func(n int64) float64 { return float64(n) / 1e9 },
	"mul100": func(f float64) float64 { return 100 * f },
	"div1e6": func(n int64) float64 { return float64(n) / 1e6 },
	"add":    func(a, b float64) float64 { return a + b },
	"signed": func(f *float64) string {
		if f == nil {
			return "–"
		}
		return fmt.Sprintf("%+.1f %%", *f)
	},
}

func estimatorChoices() []choice {
	cs := []choice{{Value: "", Label: "default (" + estimate.Default + ")"}}
	for _, n := range estimate.Names() {
		if n != estimate.Default {
			cs = append(cs, choice{Value: n, Label: n})
		}
	}
	return cs
}
