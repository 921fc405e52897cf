package web

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"

	"github.com/canifinetune/canifinetune/catalog"
	"github.com/canifinetune/canifinetune/estimate"
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
	Result     *report.Estimate
	Bar        *bar
	Errors     []ErrorSlice
	Problem    *Problem
	Yes        float64
	Marginal   float64
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
	Segments      []segment
	Marks         []mark
}

type segment struct {
	X, W    float64
	Class   string
	Name    string
	Title   string
	Percent float64
}

type mark struct {
	X     float64
	Label string
}

const barWidth = 1000

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
			Title: fmt.Sprintf("%s: %.2f GiB (%.1f %% of the total) — %s", c.Name, c.GB, 100*c.Share, c.Source)})
		x += w
	}
	if budget > 0 {
		for _, m := range []struct {
			f     float64
			label string
		}{{estimate.YesRatio, "yes ≤ 85 %"}, {estimate.MarginalRatio, "marginal ≤ 97 %"}, {1, "budget"}} {
			b.Marks = append(b.Marks, mark{X: m.f * float64(budget) / scale * barWidth, Label: m.label})
		}
	}
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
