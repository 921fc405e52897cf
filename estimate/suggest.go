package estimate

import (
	"fmt"
	"sort"
	"strings"
)

// Change is one edit to a request that a user can make, with its estimate.
type Change struct {
	// What is the flag-level change, e.g. "--grad-ckpt full".
	What     string
	Estimate *Estimate
	// Saves is the planning total saved, in bytes.
	Saves int64
}

// Changes tries the usual levers on a request that does not fit — gradient
// checkpointing, a fused loss, an 8-bit optimizer, QLoRA, a smaller batch or
// sequence — one at a time, and when none is enough, two at a time; it
// returns those that make it fit (verdict yes), largest saving first. It returns nothing when the request already fits or
// has no budget to fit into.
func Changes(est Estimator, r Request, current *Estimate) []Change {
	if current.Verdict.Fit == FitYes || current.Verdict.Fit == FitUnknown {
		return nil
	}
	r, err := r.Normalize()
	if err != nil {
		return nil
	}
	type edit struct {
		what  string
		apply func(*Request) bool
	}
	edits := []edit{
		{"--grad-ckpt full", func(q *Request) bool { ok := q.GradCkpt == "none"; q.GradCkpt = "full"; return ok }},
		{"--fused-ce liger", func(q *Request) bool { ok := !fusedCE(*q); q.FusedCE = "liger"; return ok }},
		{"--optimizer paged_adamw_8bit", func(q *Request) bool {
			ok := q.Optimizer != "paged_adamw_8bit" && q.Optimizer != "adamw_8bit" && q.Optimizer != "sgd"
			q.Optimizer = "paged_adamw_8bit"
			return ok
		}},
		{"--method qlora", func(q *Request) bool {
			if q.Method != LoRA {
				return false
			}
			q.Method, q.Quant = QLoRA, "nf4-dq"
			return true
		}},
		{"--method lora", func(q *Request) bool {
			if q.Method != Full {
				return false
			}
			q.Method, q.LoRARank, q.LoRATargets = LoRA, 16, []string{"all-linear"}
			return true
		}},
		{fmt.Sprintf("--batch %d", max(r.Batch/2, 1)), func(q *Request) bool { ok := q.Batch > 1; q.Batch = max(q.Batch/2, 1); return ok }},
		{fmt.Sprintf("--seq-len %d", max(r.SeqLen/2, 1)), func(q *Request) bool { ok := q.SeqLen >= 512; q.SeqLen /= 2; return ok }},
	}
	try := func(eds ...edit) (*Estimate, bool) {
		q := r
		q.Terse = true // only the totals are shown
		q.LoRATargets = append([]string(nil), r.LoRATargets...)
		for _, ed := range eds {
			if !ed.apply(&q) {
				return nil, false
			}
		}
		e, err := est.Estimate(q)
		return e, err == nil && e.Verdict.Fit == FitYes
	}
	var out []Change
	for _, ed := range edits {
		if e, ok := try(ed); ok {
			out = append(out, Change{What: ed.what, Estimate: e, Saves: current.Total - e.Total})
		}
	}
	if len(out) == 0 {
		// No single lever is enough: pairs, the cheapest-to-adopt first in
		// the order of edits (checkpointing and a fused loss cost little).
		for i := range edits {
			for j := i + 1; j < len(edits); j++ {
				if strings.HasPrefix(edits[i].what, "--method") && strings.HasPrefix(edits[j].what, "--method") {
					continue
				}
				if e, ok := try(edits[i], edits[j]); ok {
					out = append(out, Change{What: edits[i].what + " " + edits[j].what, Estimate: e, Saves: current.Total - e.Total})
				}
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Saves > out[j].Saves })
	return out
}
