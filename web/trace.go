package web

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/canifinetune/canifinetune/internal/report"
	"github.com/canifinetune/canifinetune/trace"
)

// traceDeadline is how long one trace upload may take, read and analysed:
// the server's ReadTimeout is for small requests, and a large trace on
// loopback still takes seconds to stream through the analysis.
const traceDeadline = 10 * time.Minute

// traceDoc is the document of `canifinetune trace --json` for one trace.
type traceDoc struct {
	*trace.Report
	WhatIf []trace.Projection `json:"what_if,omitempty"`
}

// speedups are the what-if choices of the trace view; every category's
// projection is computed for each on the server.
var speedups = []float64{1.25, 1.5, 2, 3, 4, 10}

// readTraceUpload reads a multipart upload: small fields (speedup) before
// the file, then the file in field "trace", streamed to the analysis
// without being stored. It returns the report, each device's idle-gap
// histogram and the fields it read.
func (s *Server) readTraceUpload(w http.ResponseWriter, r *http.Request) (*trace.Report, gapHists, map[string]string, *Problem) {
	if s.opts.Backend.Trace == nil {
		return nil, nil, nil, &Problem{Status: http.StatusNotImplemented, Message: "this server has no trace backend"}
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, nil, nil, &Problem{Status: http.StatusUnsupportedMediaType, Field: "trace", Message: "upload the trace as multipart/form-data, in field \"trace\": " + err.Error(),
			Hint: "curl -F trace=@trace.json.gz http://127.0.0.1:PORT/api/trace"}
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(traceDeadline))
	_ = rc.SetWriteDeadline(time.Now().Add(traceDeadline + time.Minute))
	fields := map[string]string{}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return nil, nil, fields, &Problem{Status: http.StatusBadRequest, Field: "trace", Message: "no file in field \"trace\"", Hint: "curl -F trace=@trace.json.gz http://127.0.0.1:PORT/api/trace"}
		}
		if err != nil {
			return nil, nil, fields, s.uploadProblem(err)
		}
		name := part.FormName()
		if name != "trace" {
			if name != "speedup" {
				return nil, nil, fields, badParam(name, "unknown upload field %q (known: trace, speedup)", name)
			}
			b, err := io.ReadAll(io.LimitReader(part, maxParamLen+1))
			if err != nil {
				return nil, nil, fields, s.uploadProblem(err)
			}
			if len(b) > maxParamLen {
				return nil, nil, fields, badParam(name, "field %q is over %d bytes", name, maxParamLen)
			}
			fields[name] = strings.TrimSpace(string(b))
			continue
		}
		release, pr := acquire(r, s.traceSem, "another trace analysis")
		if pr != nil {
			return nil, nil, fields, pr
		}
		hists := gapHists{}
		rep, err := s.opts.Backend.Trace(r.Context(), uploadName(part), part, trace.Options{OnGap: hists.onGap})
		release()
		if err != nil {
			return nil, nil, fields, s.uploadProblem(err)
		}
		return rep, hists, fields, nil
	}
}

// uploadName is the file name a browser sent, reduced to its base name and
// a bounded length: it names the trace in messages and the report.
func uploadName(p *multipart.Part) string {
	n := path.Base(strings.ReplaceAll(p.FileName(), "\\", "/"))
	if n == "." || n == "/" || n == "" {
		n = "upload"
	}
	for len(n) > 120 || !utf8.ValidString(n) {
		n = strings.ToValidUTF8(n[:min(len(n), 120)], "")
	}
	return n
}

func (s *Server) uploadProblem(err error) *Problem {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return &Problem{Status: http.StatusRequestEntityTooLarge, Field: "trace",
			Message: "trace upload over " + sizeWords(s.opts.MaxTraceBytes) + ", this server's limit",
			Hint:    "canifinetune trace FILE  (the command line streams a trace of any size)"}
	}
	return &Problem{Status: http.StatusBadRequest, Field: "trace", Message: err.Error()}
}

// handleTraceAPI answers a POSTed trace with the document of `canifinetune
// trace --json`, with the what-if projections the query asks for
// (what-if=attention=1.5x, repeatable, as --what-if).
func (s *Server) handleTraceAPI(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeProblem(w, &Problem{Status: http.StatusMethodNotAllowed, Message: "method " + r.Method + " not allowed: POST the trace as multipart/form-data in field \"trace\""})
		return
	}
	var whatIfs []trace.WhatIf
	for k, vs := range r.URL.Query() {
		if k != "what-if" {
			writeProblem(w, badParam(k, "unknown parameter %q (known: what-if)", k))
			return
		}
		if len(vs) > 32 {
			writeProblem(w, badParam(k, "what-if given %d times, at most 32", len(vs)))
			return
		}
		for _, v := range vs {
			wi, err := trace.ParseWhatIf(v)
			if err != nil {
				writeProblem(w, &Problem{Status: 400, Field: "what-if", Message: err.Error(), Hint: "what-if=attention=1.5x"})
				return
			}
			whatIfs = append(whatIfs, wi)
		}
	}
	rep, _, _, pr := s.readTraceUpload(w, r)
	if pr != nil {
		writeProblem(w, pr)
		return
	}
	doc := traceDoc{Report: rep}
	for _, wi := range whatIfs {
		doc.WhatIf = append(doc.WhatIf, wi.Project(rep)...)
	}
	writeJSON(w, http.StatusOK, doc)
}

type traceView struct {
	Nav      string
	Report   *trace.Report
	Devices  []deviceView
	Speedups []float64
	Speedup  float64
	MaxSize  string
	Problem  *Problem
}

type deviceView struct {
	Device           int
	Busy, Span, Idle string
	BusyPct          string
	Cats             hbars
	Steps            hbars
	Gaps             *bar
	GapParts         []gapPart
	Hist             *histChart
	Labels           []labelChart
	WhatIf           []whatIfCat
}

// labelChart is one label table (gpu_user_annotation or user_annotation)
// as bars.
type labelChart struct {
	Kind          string
	Bars          hbars
	DoubleCounted bool
}

// whatIfCat is one category's what-if row with its slider: Row at the
// chosen speed-up (what the page shows without script), and each column's
// text at every speed-up, "|"-separated in the order of speedups, for the
// slider to switch between.
type whatIfCat struct {
	Category                         string
	Row                              whatIfRow
	Index, Max                       int
	Saved, Bound, HostAs, StepSaved  string
	StepBound, LimitedBy, BoundFracs string
}

// hbars is an SVG chart of horizontal bars, one row each, scaled to the
// widest.
type hbars struct {
	Height float64
	Rows   []hbar
}

type hbar struct {
	Y, TextY     float64
	W, W2        float64 // the bar, and a second part after it (a step's gaps)
	X2           float64
	Class        string
	Label, Value string
	Title        string
}

type gapPart struct {
	Name, Class, Time, Pct string
}

type whatIfRow struct {
	Speedup               string
	Category              string
	Saved, Bound          string
	HostAsRecorded        string
	StepSaved, StepBound  string
	LimitedBy             string
	BoundFrac, HostAsFrac float64
}

const (
	labelW   = 230.0 // the label column of an hbars chart
	chartW   = 560.0 // the bars' width at the widest
	rowH     = 22.0
	barInset = 4.0
)

func newHBars(rows []hbar, values []float64, seconds []float64) hbars {
	maxV := 0.0
	for i, v := range values {
		maxV = max(maxV, v+seconds[i])
	}
	h := hbars{Height: rowH * float64(len(rows))}
	for i := range rows {
		r := &rows[i]
		r.Y, r.TextY = rowH*float64(i)+barInset/2, rowH*float64(i)+rowH*0.7
		if maxV > 0 {
			r.W = values[i] / maxV * chartW
			r.W2 = seconds[i] / maxV * chartW
		}
		r.X2 = labelW + r.W
	}
	h.Rows = rows
	return h
}

func newDeviceView(d trace.Device, r *trace.Report, speedup float64) deviceView {
	v := deviceView{Device: d.Device, Busy: fmtNS(d.BusyNS), Span: fmtNS(d.SpanNS), Idle: fmtNS(d.SpanNS - d.BusyNS),
		BusyPct: fmt.Sprintf("%.1f %%", 100*d.BusyFraction)}
	var rows []hbar
	var vals, zeros []float64
	for i, c := range d.Categories {
		if c.Ops == 0 {
			continue
		}
		per := ""
		if c.PerStepNS != nil {
			per = ", " + fmtNS(*c.PerStepNS) + " per step"
		}
		rows = append(rows, hbar{Class: "k" + strconv.Itoa(i%10), Label: c.Name, Value: fmt.Sprintf("%.1f %%  %s", 100*c.Share, fmtNS(c.ExclusiveNS)),
			Title: fmt.Sprintf("%s: %s exclusive (%.1f %% of busy), %d ops%s", c.Name, fmtNS(c.ExclusiveNS), 100*c.Share, c.Ops, per)})
		vals, zeros = append(vals, float64(c.ExclusiveNS)), append(zeros, 0)
	}
	v.Cats = newHBars(rows, vals, zeros)
	rows, vals = nil, nil
	var gaps []float64
	for _, st := range d.Steps.Steps {
		label := st.Name
		if st.Typical {
			label += " (typical)"
		}
		rows = append(rows, hbar{Class: "busy", Label: label, Value: fmtNS(st.GPUTimeNS),
			Title: fmt.Sprintf("%s: GPU time %s = busy %s + idle %s (host wait %s); host span %s", st.Name, fmtNS(st.GPUTimeNS), fmtNS(st.BusyNS), fmtNS(st.GapNS), fmtNS(st.HostWaitNS), fmtNS(st.SpanNS))})
		vals, gaps = append(vals, float64(st.BusyNS)), append(gaps, float64(st.GapNS))
	}
	v.Steps = newHBars(rows, vals, gaps)
	g := d.Gaps
	if g.TotalNS > 0 {
		v.Gaps = &bar{Width: barWidth, Height: 28}
		x := 0.0
		for _, p := range []struct {
			name, class string
			ns          int64
		}{{"host late", "g-host", g.HostLateNS}, {"in the launch call", "g-launch", g.LaunchNS}, {"queued", "g-queued", g.QueuedNS}, {"unattributed", "g-other", g.UnattributedNS}} {
			f := float64(p.ns) / float64(g.TotalNS)
			v.GapParts = append(v.GapParts, gapPart{Name: p.name, Class: p.class, Time: fmtNS(p.ns), Pct: fmt.Sprintf("%.1f %%", 100*f)})
			if p.ns <= 0 {
				continue
			}
			w := f * barWidth
			v.Gaps.Segments = append(v.Gaps.Segments, segment{X: x, W: w, Class: p.class, Name: p.name, Percent: 100 * f,
				Title: fmt.Sprintf("%s: %s (%.1f %% of the idle time)", p.name, fmtNS(p.ns), 100*f)})
			x += w
		}
	}
	for _, c := range d.Categories {
		if c.UnionNS == nil || *c.UnionNS == 0 {
			continue
		}
		cat, err := trace.ParseCategory(c.Name)
		if err != nil {
			continue
		}
		wc := whatIfCat{Category: c.Name, Max: len(speedups) - 1}
		var cols [7][]string
		for i, sp := range speedups {
			var row whatIfRow
			for _, p := range (trace.WhatIf{Category: cat, Speedup: sp}).Project(r) {
				if p.Device != d.Device {
					continue
				}
				row = whatIfRow{Speedup: strconv.FormatFloat(sp, 'f', -1, 64), Category: c.Name,
					Saved: fmtNS(p.SavedNS), Bound: fmt.Sprintf("%.1f %%", 100*p.Bound), HostAsRecorded: fmt.Sprintf("%.1f %%", 100*p.HostAsRecordedBound),
					BoundFrac: p.Bound, HostAsFrac: p.HostAsRecordedBound, LimitedBy: p.LimitedBy}
				if p.StepNS > 0 {
					row.StepSaved, row.StepBound = fmtNS(p.StepSavedNS), fmt.Sprintf("%.1f %%", 100*p.StepBound)
				}
			}
			if sp == speedup {
				wc.Row, wc.Index = row, i
			}
			for k, v := range []string{row.Saved, row.Bound, row.HostAsRecorded, row.StepSaved, row.StepBound, row.LimitedBy, fmt.Sprintf("%.4f", row.BoundFrac)} {
				cols[k] = append(cols[k], v)
			}
		}
		wc.Saved, wc.Bound, wc.HostAs, wc.StepSaved, wc.StepBound, wc.LimitedBy, wc.BoundFracs = join(cols[0]), join(cols[1]), join(cols[2]), join(cols[3]), join(cols[4]), join(cols[5]), join(cols[6])
		v.WhatIf = append(v.WhatIf, wc)
	}
	v.Labels = labelCharts(d)
	return v
}

func join(xs []string) string { return strings.Join(xs, "|") }

// maxLabelBars is how many labels a label chart draws; the rest are one
// bar, "(N more labels)".
const maxLabelBars = 12

// labelCharts are the label tables of a device as bars of their exclusive
// share of busy time, the largest first.
func labelCharts(d trace.Device) []labelChart {
	var out []labelChart
	for _, lt := range d.Labels {
		rows := slices.Clone(lt.Rows)
		slices.SortStableFunc(rows, func(a, b trace.LabelRow) int { return cmp.Compare(b.ExclusiveNS, a.ExclusiveNS) })
		var bars []hbar
		var vals, zeros []float64
		var restNS int64
		var restShare float64
		for i, lr := range rows {
			if lr.ExclusiveNS <= 0 {
				continue
			}
			if i >= maxLabelBars {
				restNS += lr.ExclusiveNS
				restShare += lr.Share
				continue
			}
			bars = append(bars, hbar{Class: "k" + strconv.Itoa(i%10), Label: clipLabel(lr.Name), Value: fmt.Sprintf("%.1f %%  %s", 100*lr.Share, fmtNS(lr.ExclusiveNS)),
				Title: fmt.Sprintf("%s: %s exclusive (%.1f %% of busy), %s inclusive, %d instances", lr.Name, fmtNS(lr.ExclusiveNS), 100*lr.Share, fmtNS(lr.InclusiveNS), lr.Instances)})
			vals, zeros = append(vals, float64(lr.ExclusiveNS)), append(zeros, 0)
		}
		if restNS > 0 {
			n := len(rows) - maxLabelBars
			bars = append(bars, hbar{Class: "k9", Label: fmt.Sprintf("(%d more labels)", n), Value: fmt.Sprintf("%.1f %%  %s", 100*restShare, fmtNS(restNS)),
				Title: fmt.Sprintf("%d more labels: %s exclusive", n, fmtNS(restNS))})
			vals, zeros = append(vals, float64(restNS)), append(zeros, 0)
		}
		if len(bars) == 0 {
			continue
		}
		out = append(out, labelChart{Kind: lt.Kind, Bars: newHBars(bars, vals, zeros), DoubleCounted: lt.DoubleCounted})
	}
	return out
}

// clipLabel keeps a label within the chart's label column.
func clipLabel(s string) string {
	if r := []rune(s); len(r) > 32 {
		return string(r[:31]) + "…"
	}
	return s
}

// handleTracePage is the trace view: the upload form (GET) and the report
// of an uploaded trace (POST).
func (s *Server) handleTracePage(w http.ResponseWriter, r *http.Request) {
	v := traceView{Nav: "trace", Speedups: speedups, Speedup: 2, MaxSize: sizeWords(s.opts.MaxTraceBytes)}
	status := http.StatusOK
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if len(r.URL.Query()) > 0 {
			v.Problem = badParam("", "the trace view takes an upload, not parameters")
		}
	case http.MethodPost:
		rep, hists, fields, pr := s.readTraceUpload(w, r)
		if sp, ok := fields["speedup"]; ok && pr == nil {
			f, err := strconv.ParseFloat(sp, 64)
			if err != nil || !validSpeedup(f) {
				pr = badParam("speedup", "speedup %q: want one of the choices", sp)
			} else {
				v.Speedup = f
			}
		}
		v.Problem = pr
		if pr == nil {
			v.Report = rep
			for _, d := range rep.Devices {
				dv := newDeviceView(d, rep, v.Speedup)
				dv.Hist = newHistChart(hists[d.Device])
				v.Devices = append(v.Devices, dv)
			}
		}
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		v.Problem = &Problem{Status: http.StatusMethodNotAllowed, Message: "method " + r.Method + " not allowed"}
	}
	if v.Problem != nil {
		status = v.Problem.Status
	}
	s.render(w, status, "trace.html", v)
}

func validSpeedup(f float64) bool {
	for _, s := range speedups {
		if s == f {
			return true
		}
	}
	return false
}

// fmtNS is the trace command's time format.
func fmtNS(ns int64) string { return report.Duration(ns) }

// sizeWords is a byte limit in MiB, or KiB below one MiB.
func sizeWords(n int64) string {
	if n >= 1<<20 {
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return strconv.FormatInt(n>>10, 10) + " KiB"
}
