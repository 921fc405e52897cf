package estimate

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/canifinetune/canifinetune/hfconfig"
)

// Unsloth is Unsloth Studio's training VRAM estimator (unslothai/unsloth,
// studio/backend/utils/hardware/VRAM_ESTIMATION.md), reproduced term by term
// as a second reference beside the Reference model:
//
//	total = weights + LoRA adapters + optimizer + gradients + activations + 1.4 GiB
//
// Every tensor is charged at 2 bytes (Studio has no precision switch), the
// 4-bit base is divided by 3.2 (3.6 with double quantization), gradients have
// the §6 floors, activations follow the §5 per-layer formula with the
// checkpointing layer multipliers, and the CUDA overhead is fixed.
//
// Studio predicts a single number. Levels maps it as follows: Reserved and
// Process are the total (Studio compares it with the device's free memory,
// which is what nvidia-smi accounts, and calibrated it on device readings);
// Allocated is the total less the fixed CUDA overhead, the tensor terms alone.
// There is no safety margin, so PlanningProxy equals Total.
type Unsloth struct{}

func init() { register(Unsloth{}) }

// Name implements Estimator.
func (Unsloth) Name() string { return "unsloth" }

// Version implements Estimator.
func (Unsloth) Version() string { return "studio-2026" }

// Describe implements Estimator.
func (Unsloth) Describe() string {
	return "reference: Unsloth Studio's estimator (studio/backend/utils/hardware/VRAM_ESTIMATION.md: 16-bit terms, NF4 ÷3.2/3.6, gradient floors, checkpointing layer multipliers, fixed 1.4 GiB CUDA overhead)"
}

// Seed 001 coefficients.
const (
	// unslothBytes is the size of every parameter, adapter, gradient and
	// activation element: §1 "LoRA / Full fp16 … × 2", §2 "× 2", §4 "× 2 (fp16)",
	// §5 "× 2".
	unslothBytes = 2
	// unslothQuant4bit divides the 16-bit size of the quantized Linear weights
	// under QLoRA: §1 "The 3.2 factor (16/5) accounts for BNB NF4 blockwise scales".
	unslothQuant4bit = 16.0 / 5
	// unslothQuant4bitDQ is §1's "tighter, still conservative 3.6 factor" for
	// bnb_4bit_use_double_quant.
	unslothQuant4bitDQ = 3.6
	// unslothActSlack is §5's "× 1.25" on the per-layer activation tensors
	// (from unsloth_zoo/vllm_utils.py).
	unslothActSlack = 1.25
	// unslothResidualWidth is §5's "S·B·2" residual term per layer.
	unslothResidualWidth = 2
	// unslothEagerFactor is §5's non-flash attention score/workspace factor
	// ("B · num_attention_heads · S² · 2 · 12.0 · effective_layers").
	unslothEagerFactor = 12.0
	// unslothGradFloor is §6's gradient floor: 15 % of model weight memory
	// ("autograd overhead, NCCL buffers, mixed-precision scaling, fragmentation").
	unslothGradFloor = 0.15
	// unslothCUDAOverhead is §7's "1.4 GB fixed — CUDA driver + PyTorch
	// runtime, calibrated on RTX 5070 Ti". GB is read as GiB: Studio's
	// vram_estimation.py defines CUDA_OVERHEAD_BYTES = int(1.4 * 1024**3) and
	// reports every figure divided by 1024**3. ⌊1.4 · 2^30⌋ bytes.
	unslothCUDAOverhead int64 = 1_503_238_553
)

// unslothOptimizerBytes is §3's calibrated optimizer bytes per trainable
// parameter. §3 lists adamw_8bit 4, adamw_torch 6, paged_adamw_32bit 8 and
// sgd 4; Studio's vram_estimation.py adds paged_adamw_8bit and adamw_bnb_8bit
// at 4 and adamw_torch_fused at 6. Studio's table also lists the aliases
// "adamw" (6) and "adamw_bnb_8bit" (4); they are not keys here because
// Normalize turns them into the names they stand for, adamw_torch and
// adamw_8bit, whose bytes are the same, so such a key could never be looked
// up. Names outside the table (adafactor, lion_8bit) get Studio's fallback of
// 4 bytes per parameter.
var unslothOptimizerBytes = map[Optimizer]int64{
	"adamw_8bit":        4,
	"paged_adamw_8bit":  4,
	"adamw_torch":       6,
	"adamw_torch_fused": 6,
	"paged_adamw_32bit": 8,
	"sgd":               4,
}

// unslothOptimizerFallback is Studio's bytes per parameter for an optimizer
// its table does not name.
const unslothOptimizerFallback = 4

// unslothGCLayers is §5's checkpointing table: how many layers' activations
// are live, for full fine-tuning and for LoRA/QLoRA. "full" is HF's
// gradient_checkpointing=True (the table's "true" row). Studio has no
// "offload" mode; Unsloth's own "unsloth" mode is the one that offloads
// checkpointed activations to host memory, so "offload" takes its row.
// "none" is absent: every layer is live.
var unslothGCLayers = map[Checkpointing]struct{ full, lora float64 }{
	"full":    {2.0, 1.0},
	"unsloth": {1.5, 1.0},
	"offload": {1.5, 1.0},
}

// unslothLinearAttn are the attention implementations §5 treats as O(S)
// memory: no quadratic score term is added for them.
var unslothLinearAttn = []Attention{FlashAttention2, SDPA, FlexAttention}

// errUnsloth8bit refuses an 8-bit base: seed 001 models only bitsandbytes
// 4-bit quantization (§1).
var errUnsloth8bit = errors.New("unsloth estimator: Unsloth Studio models only 4-bit bitsandbytes bases (NF4/FP4), not int8")

// unslothTerms are Studio's terms for one request, before sharding: the
// numbers Estimate reports and the choices Explain names.
type unslothTerms struct {
	weights, trainable, optim, grads, acts int64
	// factor divides the 4-bit weights (QLoRA), for the reason why.
	factor float64
	why    string
	// skipped are the quantizable elements a checkpoint keeps in 16-bit.
	skipped int64
	// perParam is the optimizer's bytes per trainable parameter; known is
	// false when Studio's table lacks it and its fallback applies.
	perParam int64
	known    bool
	// floorBinds: the gradient floor exceeds trainable × 2 B.
	floorBinds bool
	act        unslothActShape
}

// terms computes Studio's terms; orig is the request before Normalize.
func (Unsloth) terms(orig, r Request) unslothTerms {
	m := r.Model
	var t unslothTerms
	lora := r.Method != Full

	// §1 Weights.
	quantizable, nonQuantizable := unslothWeightElements(m)
	switch r.Method {
	case QLoRA:
		t.factor, t.why = unslothQuantFactor(orig, m)
		t.skipped = min(unslothSkippedElements(m), quantizable)
		t.weights = unslothClamp(float64((quantizable-t.skipped)*unslothBytes)/t.factor + float64(t.skipped*unslothBytes) + float64(nonQuantizable*unslothBytes))
	default:
		t.weights = (quantizable + nonQuantizable) * unslothBytes
	}

	// §2 LoRA adapters; §3 trainable parameters.
	t.trainable = quantizable + nonQuantizable // §3: all params (full FT)
	if lora {
		t.trainable = unslothAdapterParams(r) + unslothEmbeddingParams(r)
	}

	// §3 Optimizer states.
	t.perParam, t.known = unslothOptimizerBytes[r.Optimizer]
	if !t.known {
		t.perParam = unslothOptimizerFallback
	}
	t.optim = t.trainable * t.perParam

	// §5 Activations (computed before §4/§6: the LoRA gradient floor uses them).
	t.acts, t.act = unslothActivations(r)

	// §4 Gradients with the §6 floors.
	raw := t.trainable * unslothBytes
	floor := int64(float64(t.weights) * unslothGradFloor)
	if lora {
		floor = min(floor, max(t.acts, t.optim))
	}
	t.grads = max(raw, floor)
	t.floorBinds = t.grads > raw
	return t
}

// Estimate implements Estimator.
func (u Unsloth) Estimate(req Request) (*Estimate, error) {
	r, err := req.Normalize()
	if err != nil {
		return nil, err
	}
	if r.Method == QLoRA && r.Quant == "int8" {
		return nil, errUnsloth8bit
	}
	if r.Model.Seq2Seq != nil {
		return nil, errSeq2SeqEstimator(u.Name(), r.Model)
	}
	t := u.terms(req, r)
	e := &Estimate{Estimator: u.Name(), Version: u.Version(), Params: r.Model.Params(), TrainableParams: t.trainable}
	add := func(name ComponentID, b int64) {
		e.Components = append(e.Components, Component{Name: name, Bytes: b})
	}
	add(CWeights, t.weights)
	if r.Method != Full {
		add(CAdapters, t.trainable*unslothBytes)
	}
	add(COptimizer, t.optim)
	add(CGradients, t.grads)
	add(CActivations, t.acts)

	applySharding(e, r)
	tensors := e.componentSum()

	// §7 CUDA overhead, independent of the card.
	add(COverhead, unslothCUDAOverhead)
	e.Total = tensors + unslothCUDAOverhead
	e.PlanningProxy = e.Total // seed 001 has no safety margin
	e.Levels = Levels{Allocated: tensors, Reserved: e.Total, Process: e.Total}
	e.Verdict = verdict(e.Total, r)
	return finish(e, r)
}

// Explain implements Estimator: each term's line of Studio's
// VRAM_ESTIMATION.md with the choices it made for this request.
func (u Unsloth) Explain(req Request, e *Estimate) (Explanation, error) {
	r, err := req.Normalize()
	if err != nil {
		return Explanation{}, err
	}
	if r.Method == QLoRA && r.Quant == "int8" {
		return Explanation{}, errUnsloth8bit
	}
	t := u.terms(req, r)
	x := Explanation{Sources: make(map[ComponentID]string, len(e.Components))}
	for _, c := range e.Components {
		var src string
		switch c.Name {
		case CWeights:
			src = "(quantizable + non-quantizable) × 2 B (Unsloth Studio VRAM_ESTIMATION.md, model weights)"
			if r.Method == QLoRA {
				src = fmt.Sprintf("quantizable Linear × 2 B ÷ %.1f (%s) + non-quantizable (2·H·L norms, embeddings, lm_head) × 2 B (Unsloth Studio VRAM_ESTIMATION.md, model weights)", t.factor, t.why)
				if t.skipped > 0 {
					src += fmt.Sprintf("; %d llm_int8_skip_modules elements at 2 B", t.skipped)
				}
			}
		case CAdapters:
			src = "Σ r·(in+out) over the selected Linear modules of every layer (× experts) × 2 B (Unsloth Studio VRAM_ESTIMATION.md, LoRA adapters)"
		case COptimizer:
			src = fmt.Sprintf("%s %d B per trainable param (Unsloth Studio VRAM_ESTIMATION.md, optimizer states)", r.Optimizer, t.perParam)
			if !t.known {
				src = fmt.Sprintf("%s is not in Studio's table; its fallback %d B per trainable param (Unsloth Studio VRAM_ESTIMATION.md, optimizer states)", r.Optimizer, t.perParam)
			}
		case CGradients:
			src = "max(trainable × 2 B, 15 % of weights) (Unsloth Studio VRAM_ESTIMATION.md, gradients, floors)"
			if r.Method != Full {
				src = "max(trainable × 2 B, min(15 % of weights, max(activations, optimizer))) (Unsloth Studio VRAM_ESTIMATION.md, gradients, floors)"
			}
			if t.floorBinds {
				src += "; the floor binds"
			}
		case CActivations:
			src = t.act.source(r)
		case COverhead:
			src = "1.4 GiB fixed: CUDA driver + PyTorch runtime, calibrated on RTX 5070 Ti (Unsloth Studio VRAM_ESTIMATION.md, CUDA overhead)"
		}
		x.Sources[c.Name] = src + shardingNote(r, c.Name)
	}
	x.Assumptions = unslothAssumptions(req, r, t.known)
	x.Confidence = confidence(r, u.Name())
	return x, nil
}

// unslothWeightElements splits the language model's parameters as §1 does.
// Quantizable is every Linear of the decoder layers, read from the parsed
// per-layer shapes: for a Llama-like model (H + K + K + H)·H + 3·H·M per
// layer, with MoE expert projections counted once per expert (H·M·3·E) and
// the router's E·H; per-layer shape fields (layer_types, global_head_dim,
// KV-shared layers, double-wide MLPs) are already in the shapes. Biases are
// counted with their Linear. Non-quantizable is §1's 2·H·L (two norms per
// layer, as the seed writes it, whatever the norm kind) plus the token
// embedding and a separate lm_head (plus learned positions where a family
// has them). A multimodal checkpoint's frozen tower is not charged: Studio
// estimates the text model's weights only.
func unslothWeightElements(m *hfconfig.Model) (quantizable, nonQuantizable int64) {
	return m.LinearParams(), 2*m.Hidden*int64(len(m.Layers)) + m.EmbeddingLikeParams()
}

// unslothQuantFactor picks §1's divisor for the 4-bit weights. A checkpoint
// that ships a bitsandbytes quantization_config decides by its own
// bnb_4bit_use_double_quant, as Studio reads it. Otherwise an explicit
// "nf4-dq" request stands for that flag; "nf4", "fp4" or no scheme at all
// gets 3.2, which is what Studio charges a checkpoint without a
// quantization_config (it does not look at the loader's defaults). orig is
// the request before Normalize, which fills "nf4-dq" in for an empty scheme.
func unslothQuantFactor(orig Request, m *hfconfig.Model) (float64, string) {
	if pq := m.PreQuantized; pq != nil && strings.EqualFold(pq.Method, "bitsandbytes") {
		if pq.DoubleQuant {
			return unslothQuant4bitDQ, "checkpoint's bnb_4bit_use_double_quant"
		}
		return unslothQuant4bit, "checkpoint's quantization_config without double quant"
	}
	if orig.Quant == "nf4-dq" {
		return unslothQuant4bitDQ, "double quant"
	}
	return unslothQuant4bit, "NF4 blockwise scales, no double quant"
}

// unslothTextRoots are the module-path prefixes under which a checkpoint keeps
// its text decoder layers; a skip entry under any other root (a vision tower)
// names no text weight.
var unslothTextRoots = []string{"", "model", "model.model", "language_model", "language_model.model", "model.language_model", "model.language_model.model"}

// unslothSkippedElements counts the quantizable weights a pre-quantized
// checkpoint's llm_int8_skip_modules keep in 16-bit (§1). Each decoder Linear
// gets a module path layers.<i>.<group>.<name> (group self_attn, mlp,
// mlp.experts or mlp.shared_expert by role). An entry matches when, after a
// text root such as "model." or "language_model.model." is removed, its dotted
// parts are the tail of that path or of one of its ancestors down to the layer:
// "q_proj", "mlp", "self_attn.o_proj", "model.layers.0.mlp" and "layers.3" all
// select text Linears; "lm_head", "embed_tokens" and vision-tower names select
// none, since those weights are non-quantizable already or not charged. Parts
// are compared whole, so "layers.1" does not select layer 10.
func unslothSkippedElements(m *hfconfig.Model) int64 {
	pq := m.PreQuantized
	if pq == nil || len(pq.SkipModules) == 0 {
		return 0
	}
	var entries [][]string
	for _, s := range pq.SkipModules {
		if p := unslothSkipParts(s); len(p) > 0 {
			entries = append(entries, p)
		}
	}
	var n int64
	for i, l := range m.Layers {
		for _, lin := range l.Linears {
			path := unslothModulePath(i, lin)
			if slices.ContainsFunc(entries, func(p []string) bool { return unslothTailMatch(path, p) }) {
				n += lin.Params()
			}
		}
	}
	return n
}

// unslothSkipParts splits a skip entry into dotted parts, removing a text
// root in front of "layers".
func unslothSkipParts(s string) []string {
	var parts []string
	for _, p := range strings.Split(strings.TrimSpace(s), ".") {
		if p != "" {
			parts = append(parts, p)
		}
	}
	if j := slices.Index(parts, "layers"); j > 0 && slices.Contains(unslothTextRoots, strings.Join(parts[:j], ".")) {
		return parts[j:]
	}
	return parts
}

func unslothModulePath(layer int, lin hfconfig.Linear) []string {
	path := []string{"layers", strconv.Itoa(layer)}
	switch lin.Role {
	case hfconfig.RoleAttention:
		path = append(path, "self_attn")
	case hfconfig.RoleMLP, hfconfig.RoleRouter:
		path = append(path, "mlp")
	case hfconfig.RoleExpert:
		path = append(path, "mlp", "experts")
	case hfconfig.RoleSharedExpert:
		path = append(path, "mlp", "shared_expert")
	}
	return append(path, lin.Name)
}

// unslothTailMatch reports whether entry is the tail of path[:k] for some k
// that ends at the layer or below it.
func unslothTailMatch(path, entry []string) bool {
	for k := 2; k <= len(path); k++ {
		if len(entry) <= k && slices.Equal(path[k-len(entry):k], entry) {
			return true
		}
	}
	return false
}

// unslothAdapterParams is §2's Σ(A + B) over the selected modules of every
// layer: r·(in + out) for each selected Linear, times its copies (§2 "MLP
// modules multiply by E for MoE"). For a Llama-like layer this is the seed's
// table (q: H·r + r·H, k and v: H·r + r·K, gate and up: H·r + r·M, down:
// M·r + r·H); read from the parsed shapes it is also right for per-layer
// shapes. all-linear is the family's attention and MLP projections (§2:
// "all known text linear modules"), routers and per-layer-input projections
// excluded. The routed experts, which hfconfig's scopes leave out where no
// target list reaches them (Model.ExpertTargets), count under an mlp or
// all-linear scope here as §2 says.
func unslothAdapterParams(r Request) int64 {
	sum, err := r.Model.AdapterSum(r.LoRATargets)
	if err != nil {
		return 0 // Normalize has already rejected unresolvable targets
	}
	if slices.ContainsFunc(r.LoRATargets, func(t string) bool {
		switch strings.ToLower(strings.TrimSpace(t)) {
		case hfconfig.ScopeMLP, hfconfig.ScopeAllLinear, "all_linear", "all":
			return true
		}
		return false
	}) && !r.Model.ExpertTargets {
		for _, l := range r.Model.Layers {
			for _, lin := range l.Linears {
				if lin.Role == hfconfig.RoleExpert {
					sum += (lin.In + lin.Out) * lin.Copies
				}
			}
		}
	}
	return r.LoRARank * sum
}

// unslothEmbeddingParams counts embedding and output matrices trained in full.
// Studio charges embed_tokens or lm_head in the target list as a whole V×H
// matrix each, not a low-rank pair (Unsloth moves them to modules_to_save),
// and a tied pair as one matrix (weight tying keeps one trainable tensor). An
// adapter on the output layer (ExtraLoRAOnHead) is such an lm_head target.
func unslothEmbeddingParams(r Request) int64 {
	m := r.Model
	head := r.ExtraLoRAOnHead
	emb := false
	for _, name := range r.ExtraTrainable {
		switch {
		case isOutputLayer(name):
			head = true
		case isInputEmbedding(name):
			emb = true
		}
	}
	var n int64
	if head {
		n++
	}
	if emb {
		n++
	}
	if m.TiedEmbeddings {
		n = min(n, 1)
	}
	return n * m.Vocab * m.Hidden
}

// unslothActivations is §5: per layer
//
//	(S·B·(Q + K + K) + S·B·2 + S·B·(M + M)) · 2 · 1.25
//
// summed over every layer without checkpointing, or the largest layer times
// the table's multiplier with it; with an attention implementation that is
// not O(S) in memory, the larger of that and the quadratic score term
// B·heads·S²·2·12·effective_layers.
func unslothActivations(r Request) (int64, unslothActShape) {
	m := r.Model
	sb := r.SeqLen * r.Batch
	perLayer := unslothLayerWidths(m)
	var sum, largest int64
	for _, w := range perLayer {
		b := unslothClamp(float64(sb) * float64(w.qkv+unslothResidualWidth+2*w.mlp) * unslothBytes * unslothActSlack)
		sum = min(sum+b, unslothMaxBytes)
		largest = max(largest, b)
	}
	acts := sum
	shape := unslothActShape{effective: float64(len(perLayer))}
	if mult, ok := unslothGCLayers[r.GradCkpt]; ok {
		shape.checkpointed = true
		shape.effective = mult.lora
		if r.Method == Full {
			shape.effective = mult.full
		}
		acts = unslothClamp(float64(largest) * shape.effective)
	}
	if !slices.Contains(unslothLinearAttn, r.Attn) {
		shape.quadraticChecked = true
		scores := unslothClamp(float64(r.Batch) * float64(m.Heads) * float64(r.SeqLen) * float64(r.SeqLen) * unslothBytes * unslothEagerFactor * shape.effective)
		if scores > acts {
			acts = scores
			shape.quadratic = true
		}
	}
	return acts, shape
}

// unslothActShape is which of §5's forms gave the activations.
type unslothActShape struct {
	// effective is the number of layers charged.
	effective float64
	// checkpointed: the largest layer times the checkpointing multiplier.
	checkpointed bool
	// quadraticChecked: the attention is not O(S), so the quadratic score
	// term was compared; quadratic: it was the larger.
	quadraticChecked, quadratic bool
}

// source is the activations' line for the Explanation.
func (s unslothActShape) source(r Request) string {
	if s.quadratic {
		return fmt.Sprintf("%s attention's B·heads·S² × 2 B × 12 × %g layers exceeds the per-layer term (Unsloth Studio VRAM_ESTIMATION.md, activations)", r.Attn, s.effective)
	}
	src := "Σ over layers of (S·B·(Q+K+K) + S·B·2 + S·B·2·M) × 2 B × 1.25 (Unsloth Studio VRAM_ESTIMATION.md, activations)"
	if s.checkpointed {
		src = fmt.Sprintf("largest layer's (S·B·(Q+K+K) + S·B·2 + S·B·2·M) × 2 B × 1.25 × %.1f layers, checkpointing %s (Unsloth Studio VRAM_ESTIMATION.md, activations)", s.effective, r.GradCkpt)
	}
	if s.quadraticChecked {
		src += fmt.Sprintf("; exceeds %s attention's quadratic term", r.Attn)
	}
	return src
}

// unslothWidths are one layer's §5 widths: Q + K + K (the query, key and value
// projections' outputs) and M (the feed-forward width a token passes through).
type unslothWidths struct{ qkv, mlp int64 }

// unslothLayerWidths reads §5's widths per layer from the parsed shapes. With
// separate q/k/v projections Q + K + K is their output sizes, so per-layer
// head sizes count; a layer that shares another's K/V (num_kv_shared_layers)
// has no k/v projection of its own but keeps the donor's K/V tensors alive,
// so it is charged the K and V of the last earlier layer of its attention
// kind that has them. With fused or latent attention it is the seed's symbol
// table, H + 2·K with K = (H / heads) · kv_heads. M is the layer's active
// feed-forward width: intermediate_size for a dense layer; for an MoE layer
// moe_intermediate_size times the experts each token routes through, plus the
// shared expert, which is how Studio's implementation reads §5's "M (or
// moe_intermediate_size)" (every routed expert's intermediates are live).
func unslothLayerWidths(m *hfconfig.Model) []unslothWidths {
	fallback := m.Hidden + 2*m.KVHeads*m.HeadDim
	if m.Heads > 0 {
		fallback = m.Hidden + 2*(m.Hidden/m.Heads)*m.KVHeads // the seed's K
	}
	type kv struct{ k, v int64 }
	donors := map[string]kv{}
	out := make([]unslothWidths, 0, len(m.Layers))
	for _, l := range m.Layers {
		var q, k, v int64
		for _, lin := range l.Linears {
			if lin.Role != hfconfig.RoleAttention {
				continue
			}
			switch lin.Name {
			case "q_proj":
				q = lin.Out
			case "k_proj":
				k = lin.Out
			case "v_proj":
				v = lin.Out
			}
		}
		qkv := fallback
		if q > 0 {
			if k > 0 {
				donors[l.Attention] = kv{k, v}
			} else if d, ok := donors[l.Attention]; ok {
				k, v = d.k, d.v
			} else {
				k, v = m.KVHeads*m.HeadDim, m.KVHeads*m.HeadDim
			}
			qkv = q + k + v
		}
		out = append(out, unslothWidths{qkv: qkv, mlp: l.FFNActive})
	}
	return out
}

func unslothAssumptions(orig, r Request, knownOptim bool) []string {
	m := r.Model
	a := []string{fmt.Sprintf("%s, seq %d × batch %d, optimizer %s, attention %s, checkpointing %s",
		r.Method, r.SeqLen, r.Batch, r.Optimizer, r.Attn, r.GradCkpt)}
	if r.Method != Full {
		a = append(a, fmt.Sprintf("LoRA rank %d on %s", r.LoRARank, strings.Join(r.LoRATargets, ", ")))
	}
	a = append(a,
		"Unsloth Studio charges weights, adapters, gradients and activations at 2 bytes whatever the precision (here "+string(r.Precision)+")",
		"Unsloth Studio has no logits/cross-entropy term: the loss chain is not estimated",
		"CUDA overhead is a fixed 1.4 GiB (Studio: int(1.4·1024³)), not a fraction of the card; no safety margin")
	if r.Method == QLoRA {
		f, why := unslothQuantFactor(orig, m)
		a = append(a, fmt.Sprintf("4-bit decoder Linear weights at 2 B ÷ %.1f (%s); embeddings, lm_head and norms at 2 B", f, why))
	}
	if !knownOptim {
		a = append(a, fmt.Sprintf("optimizer %s is outside Unsloth Studio's table: its fallback of %d B/param", r.Optimizer, unslothOptimizerFallback))
	}
	if r.GradCkpt == "offload" {
		a = append(a, "checkpointing offload is charged as Unsloth's own (offloading) mode: 1.5 layers full FT, 1 layer LoRA")
	}
	if m.FrozenTowerParams > 0 {
		a = append(a, fmt.Sprintf("the frozen multimodal tower (%d params) is not charged: Unsloth Studio estimates text weights only", m.FrozenTowerParams))
	}
	if pq := m.PreQuantized; pq != nil && !strings.EqualFold(pq.Method, "bitsandbytes") {
		a = append(a, fmt.Sprintf("the checkpoint's %s quantization is not modelled by Unsloth Studio", pq.Method))
	}
	if r.Sharding.Strategy != "none" && r.Sharding.Strategy != "" {
		a = append(a, fmt.Sprintf("per GPU of %d, %s, offload %s (the project's sharding model; Studio only discounts extra GPUs' memory by 15 %%)", r.Sharding.GPUs, r.Sharding.Strategy, r.Sharding.CPUOffload))
	}
	return append(a, m.Notes...)
}

// unslothMaxBytes bounds every term (256 PiB, beyond any device) so that absurd
// requests saturate instead of overflowing int64 when terms are summed.
const unslothMaxBytes int64 = 1 << 58

// unslothClamp converts a byte count computed in float64 to int64, truncating
// as Studio's int() does and saturating at unslothMaxBytes.
func unslothClamp(f float64) int64 {
	if f >= float64(unslothMaxBytes) {
		return unslothMaxBytes
	}
	if f <= 0 {
		return 0
	}
	return int64(f)
}
