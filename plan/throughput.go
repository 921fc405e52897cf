package plan

import (
	"fmt"

	"github.com/canifinetune/canifinetune/estimate"
)

// Throughput is the time model's answer for one configuration as it ran:
// the tokens per second of all its GPUs together, with the step's parts.
type Throughput struct {
	Time  Time
	FLOPs FLOPs
	// TokensPerSec is world × micro-batch × accumulation × sequence length
	// over one optimizer update's modelled time (0 when Time is unknown).
	TokensPerSec float64
}

// PredictThroughput models one optimizer update of a normalized request r
// laid out as l (l.World GPUs over l.Nodes nodes) on hardware hw, with
// trainable the parameters that receive gradients (estimate's
// TrainableParams; communication moves their gradients). It is the step
// time Search ranks plans by, exported so that measured throughput can
// score it.
func PredictThroughput(hw Hardware, r estimate.Request, trainable int64, l Layout) (Throughput, error) {
	if r.Model == nil {
		return Throughput{}, fmt.Errorf("%w: no model", estimate.ErrInvalidRequest)
	}
	var w float64
	if r.Method != estimate.Full {
		var err error
		if w, err = AdapterWidth(r.Model, r.LoRATargets); err != nil {
			return Throughput{}, err
		}
	}
	world, nodes := max(l.World, 1), max(l.Nodes, 1)
	lay := layout{world: world, perNode: max(world/nodes, 1), nodes: nodes, micro: max(l.MicroBatch, 1), accum: max(l.GradAccum, 1)}
	f := TokenFLOPs(ShapeOf(r.Model), r, w)
	t := StepTime(hw, r, &estimate.Estimate{TrainableParams: trainable}, f, r.Model.Params(), lay)
	out := Throughput{Time: t, FLOPs: f}
	if t.Known && t.Step > 0 {
		out.TokensPerSec = float64(world*lay.micro*lay.accum) * float64(r.SeqLen) / t.Step
	}
	return out, nil
}
