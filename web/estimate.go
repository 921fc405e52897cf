package web

import (
	"errors"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/internal/report"
	"github.com/canifinetune/canifinetune/modelsource"
	"github.com/canifinetune/canifinetune/placement"
)

// Estimate answers Params with the document `canifinetune estimate --json`
// prints for the same flags and a card from the table (or --gpu-vram-gb):
// the model from the embedded catalog, the request checked as the CLI
// checks it, the estimate, its explanation and the changes that make it
// fit, through the same library calls.
func Estimate(p Params) (*report.Estimate, *Problem) {
	name := p["model"]
	if name == "" {
		return nil, &Problem{Status: 400, Field: "model", Message: "no model given", Hint: "canifinetune models"}
	}
	rm, err := modelsource.Catalog(name)
	if err != nil {
		pr := &Problem{Status: 500, Field: "model", Message: err.Error()}
		var me *modelsource.Error
		if errors.As(err, &me) {
			pr.Status, pr.Hint = 404, me.Hint
		}
		return nil, pr
	}
	return estimateModel(rm, p)
}

// estimateModel is Estimate for a model already resolved (from the
// catalog, the Hub or an uploaded config.json).
func estimateModel(rm *modelsource.Resolved, p Params) (*report.Estimate, *Problem) {
	s, pr := p.request(rm.Model)
	if pr != nil {
		return nil, pr
	}
	plan, err := placement.Evaluate(s.est, s.req, s.setup.GPUs(s.est.Name(), 1))
	if err != nil {
		if errors.Is(err, estimate.ErrInvalidRequest) {
			return nil, requestProblem(err)
		}
		return nil, &Problem{Status: 500, Message: err.Error()}
	}
	x, err := s.est.Explain(s.req, plan.Estimate)
	if err != nil {
		return nil, &Problem{Status: 500, Message: err.Error()}
	}
	out := report.NewEstimate(rm, s.setup.Card, s.req, plan.Estimate, x, plan.Changes)
	if name, ok := p["seq-len-dataset"]; ok {
		out.NoteLengths("dataset "+name, s.req.SeqLen)
	}
	out.Annotate(s.setup, plan)
	return &out, nil
}
