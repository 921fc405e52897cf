package hfconfig

import (
	"fmt"
	"slices"
	"strings"
)

// moduleAgg sums one module name's Linears over all layers.
type moduleAgg struct {
	name string
	// role: a name two roles share (GPT-2's c_proj, in the attention and
	// the MLP) has one sum per role, so a scope selects its own.
	role Role
	// inOut is Σ (in + out) · copies: a rank-r adapter on every such
	// module has r · inOut parameters.
	inOut int64
	// in is Σ in · (the copies a token visits): the input elements per token
	// that an adapter on every such module reads.
	in int64
}

// index precomputes the parameter sums and per-name adapter sums, so an
// estimate needs no pass over the layers; Parse calls it once the layers are
// built, and a Model is not changed after that (ExactParams aside, which
// Params reads directly).
func (m *Model) index() {
	m.indexed = false
	m.normSum, m.ffnAv, m.lin = m.NormParams(), m.ActiveFFN(), m.linears()
	m.indexed = true
	m.aggs = m.aggs[:0]
	for _, l := range m.Layers {
		for _, lin := range l.Linears {
			i := slices.IndexFunc(m.aggs, func(a moduleAgg) bool { return a.name == lin.Name && a.role == lin.Role })
			if i < 0 {
				m.aggs = append(m.aggs, moduleAgg{name: lin.Name, role: lin.Role})
				i = len(m.aggs) - 1
			}
			inOut, in := m.adapterTerms(lin)
			m.aggs[i].inOut += inOut
			m.aggs[i].in += in
		}
	}
}

// NarrowestLinear is the smallest min(in, out) of the model's Linear
// modules, routers aside (their output is the expert count); MaxInt64 for a
// model without any. A LoRA rank at or below it fits every module. A parsed
// model has it precomputed (an estimate asks for it on every request).
func (m *Model) NarrowestLinear() int64 { return m.linears().narrowest }

// LargestTensor is the model's largest single parameter tensor in elements:
// the embedding or output layer (vocab × hidden), or the widest Linear. A
// routed-expert projection counts its copies as one tensor, as it is where
// the experts are stacked (torchtune's GroupedExperts, gpt-oss,
// transformers' fused experts); where each expert is its own module this is
// a bound from above. Precomputed on a parsed model.
func (m *Model) LargestTensor() int64 { return max(m.Vocab*m.Hidden, m.linears().largest) }

// WidestSide is the largest in or out width of the model's Linear modules:
// a rank-r adapter's largest matrix is r × it at most. Precomputed on a
// parsed model.
func (m *Model) WidestSide() int64 { return m.linears().widest }

// AdapterSum is Σ (in + out) · copies over the Linear modules a LoRA target
// list selects — the adapter parameter count per unit of rank — with the
// same selection rules as Targets, without allocating.
func (m *Model) AdapterSum(spec []string) (int64, error) {
	return m.sumTargets(spec, false)
}

// AdapterInputs is Σ in · (copies a token visits) over the Linear modules a
// LoRA target list selects: per token, the input elements the adapters read
// (what an adapter's dropout or dtype cast copies and keeps for backward).
// A routed expert is visited by experts-per-token of its copies.
func (m *Model) AdapterInputs(spec []string) (int64, error) {
	return m.sumTargets(spec, true)
}

// adapterTerms is what one Linear adds to AdapterSum and to AdapterInputs.
func (m *Model) adapterTerms(l Linear) (inOut, in int64) {
	return (l.In + l.Out) * l.Copies, l.In * m.visits(l)
}

// visits is how many copies of a Linear one token passes through.
func (m *Model) visits(l Linear) int64 {
	if l.Copies > 1 && m.ExpertsPerToken > 0 {
		return min(l.Copies, m.ExpertsPerToken)
	}
	return l.Copies
}

func (m *Model) sumTargets(spec []string, inputs bool) (int64, error) {
	var n int64
	err := m.eachSelected(spec, func(a moduleAgg) {
		if inputs {
			n += a.in
		} else {
			n += a.inOut
		}
	})
	return n, err
}

// QKV are the attention projections that read one tensor, the layer's
// normed hidden state.
var QKV = []string{"q_proj", "k_proj", "v_proj"}

// SharedInputs are groups of Linear modules that read the same tensor in a
// layer: q/k/v, a gated MLP's gate and up (with Qwen2-MoE's
// shared_expert_gate, which reads the shared expert's input; w1 and w3 in
// Mixtral's experts), and DeepSeek's two low-rank attention
// down-projections.
var SharedInputs = [][]string{QKV, {"gate_proj", "up_proj", "shared_expert_gate"}, {"w1", "w3"}, {"q_a_proj", "kv_a_proj_with_mqa"}}

// DistinctInputs is AdapterInputs with the selected modules of each group
// (names that read one tensor, as in SharedInputs) counted once: the input
// elements per token of the distinct tensors the selection reads.
func (m *Model) DistinctInputs(spec []string, groups [][]string) (int64, error) {
	var n int64
	err := m.eachSelected(spec, func(a moduleAgg) { n += a.in })
	if err != nil {
		return 0, err
	}
	for _, g := range groups {
		var sum, most int64
		m.eachSelected(spec, func(a moduleAgg) {
			if slices.Contains(g, a.name) {
				sum += a.in
				most = max(most, a.in)
			}
		})
		n -= sum - most
	}
	return n, nil
}

// eachSelected calls f with the per-name sums of each module a target list
// selects, with the same rules as Targets. For a model with at most 64
// module names (every family here) it reads the sums index precomputed and
// does not allocate; beyond, it sums Targets' Linears per name.
func (m *Model) eachSelected(spec []string, f func(moduleAgg)) error {
	if m.aggs == nil {
		m.index()
	}
	if len(m.aggs) > 64 {
		lins, err := m.Targets(spec)
		var sums []moduleAgg
		for _, l := range lins {
			i := slices.IndexFunc(sums, func(a moduleAgg) bool { return a.name == l.Name })
			if i < 0 {
				sums = append(sums, moduleAgg{name: l.Name})
				i = len(sums) - 1
			}
			inOut, in := m.adapterTerms(l)
			sums[i].inOut += inOut
			sums[i].in += in
		}
		for _, a := range sums {
			f(a)
		}
		return err
	}
	var chosen uint64
	pick := func(name string, in func(Role) bool) bool {
		ok := false
		for i, a := range m.aggs {
			if a.name == name && in(a.role) {
				chosen |= 1 << i
				ok = true
			}
		}
		return ok
	}
	named := false
	for _, s := range spec {
		attn, mlp, name := m.scope(s)
		for _, n := range attn {
			pick(n, attentionScoped)
		}
		for _, n := range mlp {
			pick(n, m.mlpScoped)
		}
		named = named || strings.TrimSpace(s) != ""
		if name != "" && !pick(name, m.anyRole) {
			_, err := m.Targets(spec) // the detailed error
			if err == nil {
				err = fmt.Errorf("LoRA target %s matches no module", name)
			}
			return err
		}
	}
	if !named {
		return fmt.Errorf("empty LoRA target list")
	}
	if chosen == 0 {
		_, err := m.Targets(spec)
		return err
	}
	for i, a := range m.aggs {
		if chosen&(1<<i) != 0 {
			f(a)
		}
	}
	return nil
}
