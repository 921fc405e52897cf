package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"slices"
	"strings"

	"github.com/canifinetune/canifinetune/gpu"
	"github.com/canifinetune/canifinetune/modelsource"
)

// planParamNames are the parameters of /plan and /api/plan: the plan
// command's flags without their dashes, in form order.
var planParamNames = []string{
	"model", "method", "quant", "rank", "targets", "seq-len", "seq-len-dataset", "target-len", "batch", "grad-accum",
	"grad-ckpt", "attn", "fused-ce", "optimizer", "stack", "precision",
	"gpu", "gpus", "gpu-vram-gb", "available-vram-gb", "nodes",
	"dataset-tokens", "samples", "mean-len", "epochs", "effective-batch",
	"price-per-hour", "interconnect", "mfu", "peak-tflops", "maximize",
}

// planArgs turns Params into the plan command's arguments, after the
// checks that keep the page to what it may do: a model from the embedded
// catalog (no Hub, no local path), GPUs named from the table (no probe of
// this machine's GPUs, which plan runs when none is given).
func planArgs(p Params) ([]string, *Problem) {
	name := p["model"]
	if name == "" {
		return nil, &Problem{Status: 400, Field: "model", Message: "no model given", Hint: "canifinetune models"}
	}
	if _, err := modelsource.Catalog(name); err != nil {
		pr := &Problem{Status: 404, Field: "model", Message: err.Error()}
		var me *modelsource.Error
		if errors.As(err, &me) {
			pr.Hint = me.Hint
		}
		return nil, pr
	}
	switch {
	case strings.EqualFold(p["gpu"], "auto"):
		return nil, &Problem{Status: 400, Field: "gpu", Message: "gpu auto detects this machine's GPUs: the page plans for cards from the table", Hint: "gpu=rtx-4090, gpus=8xA100-80GB or gpu-vram-gb=24"}
	case p["gpus"] != "" && gpu.LooksLikeIndexList(p["gpus"]):
		return nil, &Problem{Status: 400, Field: "gpus", Message: "gpus " + quoteHost(p["gpus"]) + " names detected GPUs by index: the page plans for cards from the table", Hint: "gpus=8xA100-80GB"}
	case p["gpu"] == "" && p["gpus"] == "" && p["gpu-vram-gb"] == "":
		return nil, &Problem{Status: 400, Field: "gpu", Message: "plan needs the GPUs to plan for: give gpu, gpus or gpu-vram-gb", Hint: "gpu=rtx-4090, gpus=8xA100-80GB or gpu-vram-gb=24"}
	}
	var args []string
	for _, k := range planParamNames[1:] {
		if v, ok := p[k]; ok {
			// --name=value keeps a value that starts with a dash a value.
			args = append(args, "--"+k+"="+v)
		}
	}
	return append(args, "--", name), nil
}

// runPlan runs the plan command for p: its JSON document, or the problem
// in the command's own words.
func (s *Server) runPlan(r *http.Request, p Params) ([]byte, *Problem) {
	if s.opts.Backend.Plan == nil {
		return nil, &Problem{Status: http.StatusNotImplemented, Message: "this server has no plan backend"}
	}
	args, pr := planArgs(p)
	if pr != nil {
		return nil, pr
	}
	release, pr := acquire(r, s.planSem, "another plan search")
	if pr != nil {
		return nil, pr
	}
	defer release()
	out, errb, code := s.opts.Backend.Plan(args)
	switch code {
	case 0, 4: // plans found, or none fits: the document says which
		return out, nil
	case 2:
		return nil, cliProblem(http.StatusBadRequest, errb)
	default:
		return nil, cliProblem(http.StatusInternalServerError, errb)
	}
}

// cliProblem reads the command line's error ("canifinetune: MESSAGE" and
// "Try: HINT") into a Problem, with the parameter of the flag it names.
func cliProblem(status int, stderr []byte) *Problem {
	pr := &Problem{Status: status}
	for _, line := range strings.Split(strings.TrimSpace(string(stderr)), "\n") {
		switch {
		case strings.HasPrefix(line, "canifinetune: warning: "):
		case strings.HasPrefix(line, "canifinetune: "):
			pr.Message = strings.TrimPrefix(line, "canifinetune: ")
		case strings.HasPrefix(line, "Try: "):
			pr.Hint = strings.TrimPrefix(line, "Try: ")
		}
	}
	if pr.Message == "" {
		pr.Message = "plan failed"
	}
	if strings.HasPrefix(pr.Message, "--") {
		f, _, _ := strings.Cut(strings.TrimPrefix(pr.Message, "--"), " ")
		f = strings.TrimRight(f, ":,")
		if slices.Contains(planParamNames, f) {
			pr.Field = f
		}
	}
	return pr
}

func (s *Server) planParams(r *http.Request) (Params, *Problem) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		return parseValues(r.URL.Query(), planParamNames)
	case http.MethodPost:
		body, pr := readSmallBody(r)
		if pr != nil {
			return nil, pr
		}
		return parseJSON(body, planParamNames)
	}
	return nil, &Problem{Status: http.StatusMethodNotAllowed, Message: "method " + r.Method + " not allowed: GET with the page's query, or POST a JSON object"}
}

// handlePlanAPI answers with the document of `canifinetune plan --json`.
func (s *Server) handlePlanAPI(w http.ResponseWriter, r *http.Request) {
	p, pr := s.planParams(r)
	var out []byte
	if pr == nil {
		out, pr = s.runPlan(r, p)
	}
	if pr != nil {
		if pr.Status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", "GET, HEAD, POST")
		}
		writeProblem(w, pr)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Write(out)
}

// planDoc is the part of plan's JSON document the page shows.
type planDoc struct {
	Model struct {
		Name string `json:"name"`
	} `json:"model"`
	GPU struct {
		Name        string  `json:"name"`
		TotalGB     float64 `json:"total_gb"`
		AvailableGB float64 `json:"available_gb"`
		GPUsPerNode int64   `json:"gpus_per_node"`
		Nodes       int64   `json:"nodes"`
		PeakTFLOPs  float64 `json:"peak_tflops"`
	} `json:"gpu"`
	Goal struct {
		DatasetTokens   float64 `json:"dataset_tokens"`
		Epochs          float64 `json:"epochs"`
		EffectiveBatch  int64   `json:"effective_batch"`
		SeqLen          int64   `json:"seq_len"`
		PricePerGPUHour float64 `json:"price_per_gpu_hour"`
	} `json:"goal"`
	TimeModel struct {
		MFU       float64 `json:"mfu"`
		MFUSource string  `json:"mfu_source"`
		Validated bool    `json:"validated"`
	} `json:"time_model"`
	Search struct {
		Candidates int `json:"candidates"`
		Fits       int `json:"fits"`
	} `json:"search"`
	Plans  []planRow `json:"plans"`
	NoPlan *struct {
		Binding string   `json:"binding"`
		Nearest *planRow `json:"nearest"`
	} `json:"no_plan"`
	Maximum *struct {
		Quantity string   `json:"quantity"`
		Value    int64    `json:"value"`
		Bound    int64    `json:"bound"`
		Plan     *planRow `json:"plan"`
	} `json:"maximum"`
	Notes []string `json:"notes"`
}

type planRow struct {
	Rank        int     `json:"rank"`
	Method      string  `json:"method"`
	Quant       string  `json:"quant"`
	LoRARank    int64   `json:"lora_rank"`
	SeqLen      int64   `json:"seq_len"`
	MicroBatch  int64   `json:"micro_batch"`
	GradAccum   int64   `json:"grad_accum"`
	GradCkpt    string  `json:"grad_ckpt"`
	FusedCE     string  `json:"fused_ce"`
	Optimizer   string  `json:"optimizer"`
	Strategy    string  `json:"sharding"`
	Offload     string  `json:"cpu_offload"`
	Nodes       int64   `json:"nodes"`
	GPUsPerNode int64   `json:"gpus_per_node"`
	WorldSize   int64   `json:"world_size"`
	TotalGB     float64 `json:"total_gb"`
	Ratio       float64 `json:"ratio"`
	Fit         string  `json:"fit"`
	Time        struct {
		Known           bool    `json:"known"`
		Why             string  `json:"why"`
		StepS           float64 `json:"step_s"`
		TotalHours      float64 `json:"total_hours"`
		TokensPerSecond float64 `json:"tokens_per_s"`
	} `json:"time"`
	Cost          float64  `json:"cost"`
	Trades        []string `json:"trades"`
	ChangesResult bool     `json:"changes_result"`
	Command       string   `json:"command"`
	RecipeRefused string   `json:"recipe_refused"`
}

// maxPlanRows is how many plans the page's table shows (the JSON has all).
const maxPlanRows = 25

type planView struct {
	Nav     string
	Params  Params
	Fields  []planField
	Doc     *planDoc
	Rows    []planRow
	More    int
	Query   template.URL
	Problem *Problem
}

// planField is one input of the plan form.
type planField struct {
	Param, Label, Placeholder string
	Choices                   []choice
}

func planFields() []planField {
	var fs []planField
	byParam := map[string]control{}
	for _, c := range controls() {
		byParam[c.Param] = c
	}
	gpus := gpuChoices()
	gpus[0].Label = "none"
	for _, f := range []struct{ param, label, placeholder string }{
		{"model", "model", "Qwen/Qwen2.5-7B"}, {"method", "method", ""}, {"quant", "QLoRA quantization", ""},
		{"rank", "LoRA rank", "16"}, {"seq-len", "sequence length", "2048"}, {"seq-len-dataset", "lengths", ""},
		{"target-len", "target length (encoder-decoder)", "as the sequence"}, {"grad-ckpt", "activation checkpointing", ""},
		{"attn", "attention", ""}, {"fused-ce", "loss kernel", ""}, {"optimizer", "optimizer", ""},
		{"stack", "stack", ""}, {"precision", "precision", ""},
		{"gpu", "card", ""}, {"gpus", "or GPUs of a node", "8xA100-80GB"}, {"gpu-vram-gb", "or memory (GiB)", ""},
		{"nodes", "nodes", "1"}, {"dataset-tokens", "dataset tokens", "1e8"}, {"epochs", "epochs", "1"},
		{"effective-batch", "effective batch", "16"}, {"price-per-hour", "price per GPU-hour (USD)", ""},
		{"interconnect", "interconnect", "nvlink, pcie, infiniband, ethernet"}, {"mfu", "MFU", "0.35"},
		{"maximize", "maximize", "seq-len, batch or rank"},
	} {
		pf := planField{Param: f.param, Label: f.label, Placeholder: f.placeholder}
		if c, ok := byParam[f.param]; ok {
			pf.Choices = c.Choices
			if f.param == "method" {
				pf.Choices = append([]choice{{Value: "", Label: "default"}}, pf.Choices...)
			}
		}
		if f.param == "gpu" {
			pf.Choices = gpus
		}
		if f.param == "seq-len-dataset" {
			pf.Choices = datasetChoices()
		}
		fs = append(fs, pf)
	}
	return fs
}

// handlePlanPage is the plan view: the form, and the ranked plans.
func (s *Server) handlePlanPage(w http.ResponseWriter, r *http.Request) {
	if !getOnly(w, r) {
		return
	}
	v := planView{Nav: "plan", Fields: s.planForm}
	status := http.StatusOK
	p, pr := parseValues(r.URL.Query(), planParamNames)
	if p == nil {
		p = Params{}
	}
	if pr == nil && p["model"] != "" {
		var out []byte
		if out, pr = s.runPlan(r, p); pr == nil {
			v.Doc = &planDoc{}
			if err := json.Unmarshal(out, v.Doc); err != nil {
				pr = &Problem{Status: 500, Message: "plan's JSON: " + err.Error()}
			}
		}
	}
	if pr != nil {
		v.Problem, status, v.Doc = pr, pr.Status, nil
	}
	v.Params, v.Query = p, template.URL(p.query(planParamNames))
	if v.Doc != nil {
		v.Rows = v.Doc.Plans
		if len(v.Rows) > maxPlanRows {
			v.Rows, v.More = v.Rows[:maxPlanRows], len(v.Rows)-maxPlanRows
		}
	}
	s.render(w, status, "plan.html", v)
}

// render executes the named page template into a buffer first, so that a
// template error is a 500 and not half a page.
func (s *Server) render(w http.ResponseWriter, status int, name string, v any) {
	var buf bytes.Buffer
	if err := s.page.ExecuteTemplate(&buf, name, v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// readSmallBody reads a JSON POST body under MaxBodyBytes.
func readSmallBody(r *http.Request) ([]byte, *Problem) {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return nil, &Problem{Status: http.StatusUnsupportedMediaType, Message: "Content-Type " + quoteHost(ct) + ": POST a JSON object (application/json)"}
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r.Body); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &Problem{Status: http.StatusRequestEntityTooLarge, Message: "request body over " + byteLimit + ": the parameters fit in far less"}
		}
		return nil, &Problem{Status: http.StatusBadRequest, Message: "request body: " + err.Error()}
	}
	return buf.Bytes(), nil
}
