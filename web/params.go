package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/canifinetune/canifinetune/internal/bytesize"
	"github.com/canifinetune/canifinetune/placement"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/evidence"
	"github.com/canifinetune/canifinetune/gpu"
	"github.com/canifinetune/canifinetune/hfconfig"
	"github.com/canifinetune/canifinetune/internal/report"
)

// Params are a calculator configuration as the page's query (and the API's
// POST body) carries it. The names are the estimate command's flags without
// their dashes, so that a URL and a command line read alike and an error
// names the field the way the CLI names the flag. An absent or empty value
// is "not given": the CLI's default (or the --stack's) applies.
type Params map[string]string

// paramNames are the parameters the page and the API accept, in form order.
var paramNames = []string{
	"model", "method", "quant", "rank", "targets", "seq-len", "seq-len-dataset", "target-len", "batch", "grad-accum",
	"grad-ckpt", "attn", "fused-ce", "optimizer", "stack", "frees-logits", "precision",
	"gpu", "gpu-vram-gb", "available-vram-gb", "estimator",
}

// enumParams maps a parameter to estimate's option table it is chosen from.
var enumParams = map[string]string{
	"method": "method", "precision": "precision", "quant": "quant", "grad-ckpt": "grad_ckpt",
	"optimizer": "optimizer", "attn": "attn", "fused-ce": "fused_ce", "stack": "stack",
}

// maxParamLen bounds one value: the longest sensible value is a model id or
// a list of module names.
const maxParamLen = 256

// Problem is a request the server refuses: the HTTP status, the message (the
// CLI's words where the CLI has them), the parameter it is about, and what
// to try. It is also the JSON body of an API error.
type Problem struct {
	Status  int    `json:"-"`
	Message string `json:"error"`
	Field   string `json:"field,omitempty"`
	Hint    string `json:"hint,omitempty"`
}

func (p *Problem) Error() string { return p.Message }

func badParam(field, format string, args ...any) *Problem {
	return &Problem{Status: 400, Field: field, Message: fmt.Sprintf(format, args...), Hint: "canifinetune serve --help  (the parameters)"}
}

// ParseQuery reads Params from a URL query: unknown names, repeated names
// and overlong values are refused by name.
func ParseQuery(q url.Values) (Params, *Problem) {
	return parseValues(q, paramNames)
}

// parseValues reads Params from q, refusing names not among names.
func parseValues(q url.Values, names []string) (Params, *Problem) {
	p := Params{}
	for k, vs := range q {
		if !slices.Contains(names, k) {
			return nil, badParam(k, "unknown parameter %q (known: %s)", k, strings.Join(names, ", "))
		}
		if len(vs) > 1 {
			return nil, badParam(k, "parameter %q given %d times", k, len(vs))
		}
		if len(vs[0]) > maxParamLen {
			return nil, badParam(k, "parameter %q is %d bytes long, at most %d", k, len(vs[0]), maxParamLen)
		}
		if v := strings.TrimSpace(vs[0]); v != "" {
			p[k] = v
		}
	}
	return p, nil
}

// ParseJSON reads Params from a POST body: a JSON object with the same
// names, each a string, a number, a boolean or (targets) a list of strings.
func ParseJSON(body []byte) (Params, *Problem) {
	return parseJSON(body, paramNames)
}

func parseJSON(body []byte, names []string) (Params, *Problem) {
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, badParam("", "request body: %v (want a JSON object of the page's parameters)", err)
	}
	if dec.More() {
		return nil, badParam("", "request body: more than one JSON value")
	}
	q := url.Values{}
	for k, v := range m {
		var s string
		switch v := v.(type) {
		case string:
			s = v
		case json.Number:
			s = v.String()
		case bool:
			s = strconv.FormatBool(v)
		case nil:
			continue
		case []any:
			var parts []string
			for _, x := range v {
				xs, ok := x.(string)
				if !ok {
					return nil, badParam(k, "parameter %q: want a list of strings", k)
				}
				parts = append(parts, xs)
			}
			s = strings.Join(parts, ",")
		default:
			return nil, badParam(k, "parameter %q: want a string, a number or a list of strings", k)
		}
		q.Set(k, s)
	}
	return parseValues(q, names)
}

// Query is the URL query that reproduces p, in form order.
func (p Params) Query() string { return p.query(paramNames) }

func (p Params) query(names []string) string {
	q := url.Values{}
	for _, k := range names {
		if v := p[k]; v != "" {
			q.Set(k, v)
		}
	}
	return q.Encode()
}

// setting is what Params decide, before the model and the estimate.
type setting struct {
	req   estimate.Request
	setup placement.Setup
	est   estimate.Estimator
}

// request turns Params into an estimate request for model m, the way the estimate
// command turns its flags into one, with the same checks and words.
func (p Params) request(m *hfconfig.Model) (setting, *Problem) {
	var s setting
	r := &s.req
	r.Model = m
	r.Method = estimate.LoRA
	r.SeqLen, r.Batch, r.GradAccum = 2048, 1, 1
	r.Sharding = estimate.Sharding{Strategy: estimate.NoSharding, GPUs: 1, CPUOffload: estimate.OffloadNone}
	for name, opt := range enumParams {
		v, ok := p[name]
		if !ok {
			continue
		}
		canon, err := enumValue(opt, v)
		if err != nil {
			pr := badParam(name, "%s", enumMessage(name, opt, v))
			if h := report.ValueHint("--"+name, v); h != "" {
				pr.Hint = h
			}
			return s, pr
		}
		switch name {
		case "method":
			r.Method = estimate.Method(canon)
		case "precision":
			r.Precision = estimate.Precision(canon)
		case "quant":
			r.Quant = estimate.Quant(canon)
		case "grad-ckpt":
			r.GradCkpt = estimate.Checkpointing(canon)
		case "optimizer":
			r.Optimizer = estimate.Optimizer(canon)
		case "attn":
			r.Attn = estimate.Attention(canon)
		case "fused-ce":
			r.FusedCE = estimate.LossKernel(canon)
		}
	}
	for _, f := range []struct {
		name string
		to   *int64
	}{{"seq-len", &r.SeqLen}, {"target-len", &r.TargetLen}, {"batch", &r.Batch}, {"grad-accum", &r.GradAccum}, {"rank", &r.LoRARank}} {
		v, ok := p[f.name]
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return s, badParam(f.name, "--%s: expected an integer, got %q", f.name, v)
		}
		*f.to = n
	}
	if t, ok := p["targets"]; ok {
		r.LoRATargets = strings.Split(t, ",")
	}
	if name, ok := p["seq-len-dataset"]; ok {
		// As the CLI's --seq-len-dataset: a length histogram the binary
		// keeps, with the sequence length as the bound.
		d, err := evidence.Histogram(name)
		if err != nil {
			return s, badParam("seq-len-dataset", "--seq-len-dataset: %v", err)
		}
		r.Lengths = &d
	}
	var err error
	if s.est, err = estimate.ByName(p["estimator"]); err != nil {
		return s, badParam("estimator", "%v", err)
	}
	if name, ok := p["stack"]; ok {
		st, err := estimate.StackByName(name)
		if err != nil {
			return s, badParam("stack", "%v", err)
		}
		st.Apply(r)
	}
	if v, ok := p["frees-logits"]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return s, badParam("frees-logits", "--frees-logits: expected true or false, got %q", v)
		}
		r.FreesLogits = b
	}
	// The request reads 0 as "the default"; a given 0 is an error, as in the CLI.
	if p["rank"] != "" && r.LoRARank == 0 {
		return s, requestProblem(&estimate.FieldError{Field: "lora_rank", Value: "0", Want: fmt.Sprintf("an integer in 1..%d", estimate.MaxLoRARank)})
	}
	if r.GradAccum == 0 {
		return s, requestProblem(&estimate.FieldError{Field: "grad_accum", Value: "0", Want: fmt.Sprintf("an integer in 1..%d", estimate.MaxGradAccum)})
	}
	if pr := p.gpu(&s); pr != nil {
		return s, pr
	}
	// As the estimate command: every number and combination is checked
	// before the GPU setup goes into the request.
	if _, err := r.Normalize(); err != nil {
		return s, requestProblem(err)
	}
	if err := s.setup.SizeWorld(estimate.NoSharding, 0, 1); err != nil {
		return s, &Problem{Status: 400, Message: err.Error()}
	}
	s.setup.Apply(r)
	return s, nil
}

// gpu reads gpu, gpu-vram-gb and available-vram-gb as the estimate command
// reads --gpu, --gpu-vram-gb and --available-vram-gb.
func (p Params) gpu(s *setting) *Problem {
	var gib [2]float64
	for i, f := range []struct{ name, field string }{{"gpu-vram-gb", "gpu_vram_gb"}, {"available-vram-gb", "available_vram_gb"}} {
		v, ok := p[f.name]
		if !ok {
			continue
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return badParam(f.name, "--%s: expected a number, got %q", f.name, v)
		}
		if _, err := estimate.GiBBytes(f.field, x); err != nil {
			return requestProblem(err)
		}
		gib[i] = x
	}
	vram, avail := gib[0], gib[1]
	name := p["gpu"]
	s.setup = placement.Setup{Index: -1}
	var card *gpu.Card
	total := int64(vram * estimate.GiB)
	switch {
	case strings.EqualFold(name, "auto"):
		return &Problem{Status: 400, Field: "gpu", Message: "gpu auto detects this machine's GPUs: the page plans for a card from the table", Hint: "gpu=rtx-4090, or gpu-vram-gb=24"}
	case name != "" && vram > 0:
		return &Problem{Status: 400, Field: "gpu", Message: "give --gpu or --gpu-vram-gb, not both", Hint: "--gpu rtx-4090  or  --gpu-vram-gb 24"}
	case name != "":
		k, err := gpu.Lookup(name)
		if err != nil {
			return &Problem{Status: 400, Field: "gpu", Message: err.Error(), Hint: "canifinetune gpus  (the table), or --gpu-vram-gb N"}
		}
		card, total = &k, k.MemoryBytes()
	case vram == 0 && avail > 0:
		return &Problem{Status: 400, Field: "available-vram-gb", Message: "--available-vram-gb needs the card's total too (--gpu or --gpu-vram-gb): overheads are sized from the total", Hint: "--gpu rtx-4090 --available-vram-gb 21.5"}
	case vram == 0:
		return nil // no GPU: no verdict
	}
	var err error
	if s.setup, err = placement.OnCard(card, total, int64(avail*estimate.GiB)); err != nil {
		var be *placement.BudgetError
		if errors.As(err, &be) {
			return &Problem{Status: 400, Field: "available-vram-gb", Message: fmt.Sprintf("--available-vram-gb %.2f exceeds %s's %.2f GiB", avail, be.Of, bytesize.InGiB(be.Total)), Hint: "--available-vram-gb below " + be.Of + "'s total"}
		}
		return &Problem{Status: 400, Field: "gpu", Message: err.Error()}
	}
	return nil
}

// requestProblem is an invalid request in the CLI's words, about the
// parameter of the flag that sets the field.
func requestProblem(err error) *Problem {
	d := report.DescribeRequestError(err)
	field := d.Param()
	if !slices.Contains(paramNames, field) {
		field = ""
	}
	return &Problem{Status: 400, Field: field, Message: d.Message, Hint: d.Hint}
}

// enumValue is the canonical name of v among an option's choices.
func enumValue(option, v string) (string, error) {
	for _, o := range estimate.Options() {
		if o.Name != option {
			continue
		}
		for _, c := range o.Choices {
			if c.Name == v || slices.Contains(c.Aliases, v) {
				return c.Name, nil
			}
		}
	}
	return "", fmt.Errorf("unknown %s %q", option, v)
}

// enumMessage is kong's message for a value outside a flag's enum, which
// the CLI prints: `--method must be one of "full","lora","qlora" but got "x"`.
func enumMessage(param, option, v string) string {
	var names []string
	for _, o := range estimate.Options() {
		if o.Name == option {
			for _, c := range o.Choices {
				names = append(names, strconv.Quote(c.Name))
				for _, a := range c.Aliases {
					names = append(names, strconv.Quote(a))
				}
			}
		}
	}
	return fmt.Sprintf("--%s must be one of %s but got %q", param, strings.Join(names, ","), v)
}
