package estimate

import (
	"errors"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/canifinetune/canifinetune/catalog"
	"github.com/canifinetune/canifinetune/hfconfig"
)

// tinyLlamaJSON is a small Llama for hand computation with seed 001's symbols:
// H 64, L 4, heads 4, kv heads 2 (so K = 64/4·2 = 32), M 128, V 1000, untied.
const tinyLlamaJSON = `{"model_type":"llama","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,
	"num_key_value_heads":2,"intermediate_size":128,"vocab_size":1000,"tie_word_embeddings":false}`

func parseModel(t *testing.T, config string) *hfconfig.Model {
	t.Helper()
	m, err := hfconfig.Parse([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// components returns an estimate's components by name.
func components(e *Estimate) map[ComponentID]int64 {
	got := map[ComponentID]int64{}
	for _, c := range e.Components {
		got[c.Name] = c.Bytes
	}
	return got
}

// Every term of seed 001 against a hand computation on the tiny Llama.
func TestUnslothComponents(t *testing.T) {
	m := parseModel(t, tinyLlamaJSON)
	const H, L, K, M, V, heads = 64, 4, 32, 128, 1000, 4
	// §1: QKVO = (H+K+K+H)·H, MLP = 3·H·M per layer; 2·H·L norms + V·H
	// embedding + V·H lm_head (untied).
	const quantizable = ((H+K+K+H)*H + 3*H*M) * L // 147456
	const nonQuant = 2*H*L + V*H + V*H            // 128512
	const fp16Weights = (quantizable + nonQuant) * 2
	// §2, rank 8 on q, k, v, o: (H·r + r·H) + 2·(H·r + r·K) + (H·r + r·H) per layer.
	const r = 8
	const attnLoRA = (2*(H*r+r*H) + 2*(H*r+r*K)) * L // 14336
	// all-linear adds gate, up (H·r + r·M) and down (M·r + r·H).
	const allLoRA = attnLoRA + (2*(H*r+r*M)+(M*r+r*H))*L
	// §5 per layer at S·B tokens: (S·B·(H+K+K) + S·B·2 + S·B·(M+M)) · 2 · 1.25.
	perLayer := func(sb int64) int64 { return int64(float64(sb*((H+K+K)+2+(M+M))) * 2 * 1.25) }
	// §5 eager: B·heads·S²·2·12 per effective layer.
	eager := func(s, b int64, layers float64) int64 { return int64(float64(b*heads*s*s*2) * 12 * layers) }
	floor := func(w int64) int64 { return int64(float64(w) * 0.15) }
	const overhead = 1503238553 // §7: ⌊1.4 · 2^30⌋

	tests := []struct {
		name string
		req  Request
		want map[ComponentID]int64
	}{
		{
			// Gradient floor binds at 15 % of weights: activations (4 layers,
			// no checkpointing) are larger, so min() picks the weight cap.
			name: "lora adamw_torch, no checkpointing: floor = 15 % of weights",
			req:  Request{Method: LoRA, LoRARank: r, SeqLen: 100, Batch: 2},
			want: map[ComponentID]int64{
				CWeights: fp16Weights, CAdapters: attnLoRA * 2, COptimizer: attnLoRA * 6,
				CGradients: floor(fp16Weights), CActivations: 4 * perLayer(200), COverhead: overhead,
			},
		},
		{
			// Activations and optimizer are below 15 % of weights: the floor is
			// max(activations, optimizer) = optimizer (adamw_8bit, 4 B/param).
			name: "lora adamw_8bit, one token: floor = optimizer",
			req:  Request{Method: LoRA, LoRARank: r, SeqLen: 1, Batch: 1, GradCkpt: "unsloth", Optimizer: "adamw_8bit"},
			want: map[ComponentID]int64{
				CWeights: fp16Weights, CAdapters: attnLoRA * 2, COptimizer: attnLoRA * 4,
				CGradients: attnLoRA * 4, CActivations: perLayer(1), COverhead: overhead,
			},
		},
		{
			// Activations between optimizer and 15 % of weights: the floor is
			// the activations.
			name: "lora adamw_8bit, 70 tokens: floor = activations",
			req:  Request{Method: LoRA, LoRARank: r, SeqLen: 70, Batch: 1, GradCkpt: "unsloth", Optimizer: "adamw_8bit"},
			want: map[ComponentID]int64{
				CWeights: fp16Weights, CAdapters: attnLoRA * 2, COptimizer: attnLoRA * 4,
				CGradients: perLayer(70), CActivations: perLayer(70), COverhead: overhead,
			},
		},
		{
			// Rank 32: raw gradients (trainable × 2 B) exceed 15 % of weights,
			// so no floor binds.
			name: "lora rank 32: raw gradients, no floor",
			req:  Request{Method: LoRA, LoRARank: 4 * r, SeqLen: 100, Batch: 2, GradCkpt: "full"},
			want: map[ComponentID]int64{
				CWeights: fp16Weights, CAdapters: 4 * attnLoRA * 2, COptimizer: 4 * attnLoRA * 6,
				CGradients: 4 * attnLoRA * 2, CActivations: perLayer(200), COverhead: overhead,
			},
		},
		{
			name: "qlora nf4 ÷ 3.2, all-linear, paged_adamw_32bit",
			req:  Request{Method: QLoRA, Quant: "nf4", LoRARank: r, LoRATargets: []string{"all-linear"}, SeqLen: 100, Batch: 2, GradCkpt: "unsloth", Optimizer: "paged_adamw_32bit"},
			want: map[ComponentID]int64{
				// raw gradients (65536 B) exceed 15 % of the 4-bit weights (52377 B).
				CWeights: int64(quantizable*2/3.2 + nonQuant*2), CAdapters: allLoRA * 2, COptimizer: allLoRA * 8,
				CGradients: allLoRA * 2, CActivations: perLayer(200), COverhead: overhead,
			},
		},
		{
			name: "qlora nf4-dq ÷ 3.6",
			req:  Request{Method: QLoRA, Quant: "nf4-dq", LoRARank: r, SeqLen: 100, Batch: 2, GradCkpt: "unsloth", Optimizer: "sgd"},
			want: map[ComponentID]int64{
				CWeights: int64(quantizable*2/3.6 + nonQuant*2), CAdapters: attnLoRA * 2, COptimizer: attnLoRA * 4,
				CGradients: floor(int64(quantizable*2/3.6 + nonQuant*2)), CActivations: perLayer(200), COverhead: overhead,
			},
		},
		{
			// Full FT: trainable = every parameter, so raw gradients equal the
			// weights and the 15 % floor cannot bind (Studio's own arithmetic).
			name: "full adamw_torch_fused, HF checkpointing: 2.0 layers",
			req:  Request{Method: Full, SeqLen: 100, Batch: 2, GradCkpt: "full", Optimizer: "adamw_torch_fused"},
			want: map[ComponentID]int64{
				CWeights: fp16Weights, COptimizer: (quantizable + nonQuant) * 6,
				CGradients: fp16Weights, CActivations: 2 * perLayer(200), COverhead: overhead,
			},
		},
		{
			name: "full, unsloth checkpointing: 1.5 layers",
			req:  Request{Method: Full, SeqLen: 100, Batch: 2, GradCkpt: "unsloth"},
			want: map[ComponentID]int64{
				CWeights: fp16Weights, COptimizer: (quantizable + nonQuant) * 6,
				CGradients: fp16Weights, CActivations: int64(float64(perLayer(200)) * 1.5), COverhead: overhead,
			},
		},
		{
			name: "full, offload checkpointing is charged as unsloth's",
			req:  Request{Method: Full, SeqLen: 100, Batch: 2, GradCkpt: "offload"},
			want: map[ComponentID]int64{
				CWeights: fp16Weights, COptimizer: (quantizable + nonQuant) * 6,
				CGradients: fp16Weights, CActivations: int64(float64(perLayer(200)) * 1.5), COverhead: overhead,
			},
		},
		{
			// Eager at S 100: the quadratic term over 4 layers wins the max.
			name: "full eager, no checkpointing: quadratic term wins",
			req:  Request{Method: Full, SeqLen: 100, Batch: 2, Attn: "eager"},
			want: map[ComponentID]int64{
				CWeights: fp16Weights, COptimizer: (quantizable + nonQuant) * 6,
				CGradients: fp16Weights, CActivations: eager(100, 2, 4), COverhead: overhead,
			},
		},
		{
			// Eager at S 8: B·heads·S²·24 = 12288 B per layer < 15440 B per
			// layer of the linear term; the linear term wins.
			name: "full eager, 8 tokens: per-layer term wins",
			req:  Request{Method: Full, SeqLen: 8, Batch: 2, Attn: "eager", Optimizer: "sgd"},
			want: map[ComponentID]int64{
				CWeights: fp16Weights, COptimizer: (quantizable + nonQuant) * 4,
				CGradients: fp16Weights, CActivations: 4 * perLayer(16), COverhead: overhead,
			},
		},
		{
			// LoRA with checkpointing: effective layers 1.0 in both terms.
			name: "lora eager with checkpointing: one layer of scores",
			req:  Request{Method: LoRA, LoRARank: r, SeqLen: 100, Batch: 2, Attn: "eager", GradCkpt: "full"},
			want: map[ComponentID]int64{
				CWeights: fp16Weights, CAdapters: attnLoRA * 2, COptimizer: attnLoRA * 6,
				CGradients: floor(fp16Weights), CActivations: eager(100, 2, 1), COverhead: overhead,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.Model = m
			e, err := Unsloth{}.Estimate(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, components(e)); d != "" {
				t.Errorf("components (-want +got):\n%s", d)
			}
			var sum int64
			for _, c := range e.Components {
				sum += c.Bytes
			}
			if e.Total != sum || e.PlanningProxy != e.Total {
				t.Errorf("total %d, planning proxy %d; components sum to %d (seed 001 has no safety margin)", e.Total, e.PlanningProxy, sum)
			}
			want := Levels{Allocated: sum - overhead, Reserved: sum, Process: sum}
			if e.Levels != want {
				t.Errorf("levels = %+v, want %+v (allocated excludes the CUDA overhead)", e.Levels, want)
			}
		})
	}
}

// The checkpointing table (§5) on its own: live layers for each mode.
func TestUnslothCheckpointLayers(t *testing.T) {
	m := parseModel(t, tinyLlamaJSON)
	one := func(method Method) int64 {
		e, err := Unsloth{}.Estimate(Request{Model: m, Method: method, SeqLen: 64, Batch: 1, GradCkpt: "none"})
		if err != nil {
			t.Fatal(err)
		}
		a, _ := e.Component(CActivations)
		return a / 4 // 4 identical layers
	}
	for _, tt := range []struct {
		method Method
		gc     string
		layers float64
	}{
		{Full, "none", 4}, {Full, "full", 2}, {Full, "unsloth", 1.5}, {Full, "offload", 1.5},
		{LoRA, "none", 4}, {LoRA, "full", 1}, {LoRA, "unsloth", 1}, {QLoRA, "unsloth", 1}, {QLoRA, "none", 4},
	} {
		e, err := Unsloth{}.Estimate(Request{Model: m, Method: tt.method, SeqLen: 64, Batch: 1, GradCkpt: Checkpointing(tt.gc)})
		if err != nil {
			t.Fatal(err)
		}
		a, _ := e.Component(CActivations)
		if want := int64(float64(one(tt.method)) * tt.layers); a != want {
			t.Errorf("%s, checkpointing %s: activations %d, want %g layers = %d", tt.method, tt.gc, a, tt.layers, want)
		}
	}
}

// The divisor of the 4-bit weights: the request's scheme, unless the
// checkpoint ships its own bitsandbytes quantization_config.
func TestUnslothQuantFactor(t *testing.T) {
	plain := parseModel(t, tinyLlamaJSON)
	pre := func(dq bool) *hfconfig.Model {
		flag := "false"
		if dq {
			flag = "true"
		}
		return parseModel(t, `{"model_type":"llama","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,
			"num_key_value_heads":2,"intermediate_size":128,"vocab_size":1000,"tie_word_embeddings":false,
			"quantization_config":{"quant_method":"bitsandbytes","load_in_4bit":true,"bnb_4bit_use_double_quant":`+flag+`}}`)
	}
	const quantizable, nonQuant = 147456, 128512
	for _, tt := range []struct {
		name   string
		model  *hfconfig.Model
		quant  string
		factor float64
	}{
		{"nf4", plain, "nf4", 3.2},
		{"fp4", plain, "fp4", 3.2},
		{"nf4-dq", plain, "nf4-dq", 3.6},
		{"no scheme: Studio's 3.2 for a checkpoint without quantization_config", plain, "", 3.2},
		{"checkpoint with double quant overrides nf4", pre(true), "nf4", 3.6},
		{"checkpoint without double quant overrides nf4-dq", pre(false), "nf4-dq", 3.2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, err := Unsloth{}.Estimate(Request{Model: tt.model, Method: QLoRA, Quant: Quant(tt.quant), SeqLen: 10, Batch: 1})
			if err != nil {
				t.Fatal(err)
			}
			w, _ := e.Component(CWeights)
			if want := int64(quantizable*2/tt.factor + nonQuant*2); w != want {
				t.Errorf("weights %d, want quantizable·2/%.1f + non-quantizable·2 = %d", w, tt.factor, want)
			}
		})
	}
	if _, err := (Unsloth{}).Estimate(Request{Model: plain, Method: QLoRA, Quant: "int8", SeqLen: 10, Batch: 1}); !errors.Is(err, errUnsloth8bit) {
		t.Errorf("int8 base: err = %v, want a refusal (seed 001 has no 8-bit path)", err)
	}
}

// llm_int8_skip_modules entries that name text layers keep those weights in
// 16-bit; lm_head and vision-tower entries charge nothing extra.
func TestUnslothSkipModules(t *testing.T) {
	m := parseModel(t, `{"model_type":"llama","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,
		"num_key_value_heads":2,"intermediate_size":128,"vocab_size":1000,"tie_word_embeddings":false,
		"quantization_config":{"quant_method":"bitsandbytes","load_in_4bit":true,"bnb_4bit_use_double_quant":true,
		"llm_int8_skip_modules":["lm_head","model.layers.0.mlp","self_attn.q_proj","vision_tower.model.layers.1.self_attn"]}}`)
	const H, M, L = 64, 128, 4
	const quantizable, nonQuant = 147456, 128512
	// layer 0's MLP (3·H·M) and every layer's q_proj (H·H).
	const skipped = 3*H*M + H*H*L
	if got := unslothSkippedElements(m); got != skipped {
		t.Errorf("skipped elements %d, want %d", got, skipped)
	}
	e, err := Unsloth{}.Estimate(Request{Model: m, Method: QLoRA, SeqLen: 10, Batch: 1})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := e.Component(CWeights)
	divisor := 3.6
	if want := int64(float64((quantizable-skipped)*2)/divisor + skipped*2 + nonQuant*2); w != want {
		t.Errorf("weights %d, want %d (skipped modules at 2 B, the rest ÷ 3.6)", w, want)
	}
	// LoRA loads the checkpoint unquantized in Studio's model: skip lists do not matter.
	e, err = Unsloth{}.Estimate(Request{Model: m, Method: LoRA, SeqLen: 10, Batch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if w, _ := e.Component(CWeights); w != (quantizable+nonQuant)*2 {
		t.Errorf("LoRA weights %d, want %d", w, (quantizable+nonQuant)*2)
	}
}

func TestUnslothSkipMatch(t *testing.T) {
	path := func(layer int, role hfconfig.Role, name string) []string {
		return unslothModulePath(layer, hfconfig.Linear{Name: name, Role: role})
	}
	for _, tt := range []struct {
		entry string
		path  []string
		want  bool
	}{
		{"q_proj", path(3, hfconfig.RoleAttention, "q_proj"), true},
		{"model.layers.3.self_attn.q_proj", path(3, hfconfig.RoleAttention, "q_proj"), true},
		{"language_model.model.layers.3", path(3, hfconfig.RoleMLP, "down_proj"), true},
		{"layers.1", path(10, hfconfig.RoleMLP, "down_proj"), false},
		{"layers.1", path(1, hfconfig.RoleMLP, "down_proj"), true},
		{"mlp", path(5, hfconfig.RoleMLP, "up_proj"), true},
		{"mlp", path(5, hfconfig.RoleAttention, "k_proj"), false},
		{"mlp.experts", path(2, hfconfig.RoleExpert, "gate_proj"), true},
		{"mlp.experts", path(2, hfconfig.RoleSharedExpert, "gate_proj"), false},
		{"gate", path(2, hfconfig.RoleExpert, "gate_proj"), false},
		{"gate", path(2, hfconfig.RoleRouter, "gate"), true},
		{"proj", path(0, hfconfig.RoleAttention, "q_proj"), false},
		{"vision_tower.model.layers.0.mlp", path(0, hfconfig.RoleMLP, "up_proj"), false},
		{"lm_head", path(0, hfconfig.RoleMLP, "up_proj"), false},
		{"0.mlp.up_proj", path(0, hfconfig.RoleMLP, "up_proj"), true},
	} {
		if got := unslothTailMatch(tt.path, unslothSkipParts(tt.entry)); got != tt.want {
			t.Errorf("skip %q on %v = %v, want %v", tt.entry, tt.path, got, tt.want)
		}
	}
}

// Per-layer shapes: KV-shared layers keep their donor's K/V activations and
// double-wide MLPs double M (§2's layer-shape fields, §5).
func TestUnslothPerLayerShapes(t *testing.T) {
	m := parseModel(t, `{"model_type":"llama","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,
		"num_key_value_heads":2,"head_dim":16,"global_head_dim":32,"intermediate_size":128,"vocab_size":1000,
		"layer_types":["sliding_attention","full_attention","sliding_attention","full_attention"],
		"num_kv_shared_layers":2,"use_double_wide_mlp":true}`)
	// Sliding: q 4·16, k = v 2·16. Full: q 4·32, k = v 2·32. Layers 2 and 3
	// share K/V with layers 0 and 1 and have a double-wide MLP.
	want := []unslothWidths{{64 + 32 + 32, 128}, {128 + 64 + 64, 128}, {64 + 32 + 32, 256}, {128 + 64 + 64, 256}}
	if d := cmp.Diff(want, unslothLayerWidths(m), cmp.AllowUnexported(unslothWidths{})); d != "" {
		t.Errorf("layer widths (-want +got):\n%s", d)
	}
	// Adapters count only the projections the layers have: no k/v on layers 2, 3.
	const H, r = 64, 4
	wantLoRA := int64(r * ((H + 64) + 2*(H+32) + (64 + H) + // layer 0
		(H + 128) + 2*(H+64) + (128 + H) + // layer 1
		(H + 64) + (64 + H) + // layer 2
		(H + 128) + (128 + H))) // layer 3
	e, err := Unsloth{}.Estimate(Request{Model: m, Method: LoRA, LoRARank: r, SeqLen: 10, Batch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if e.TrainableParams != wantLoRA {
		t.Errorf("LoRA params %d, want %d", e.TrainableParams, wantLoRA)
	}
	// The largest layer (3) times one layer under checkpointing.
	e, err = Unsloth{}.Estimate(Request{Model: m, Method: LoRA, LoRARank: r, SeqLen: 10, Batch: 1, GradCkpt: "unsloth"})
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := e.Component(CActivations); a != int64(float64(10*(256+2+512))*2.5) {
		t.Errorf("activations %d, want the largest layer's %d", a, int64(float64(10*(256+2+512))*2.5))
	}
}

// Embedding and output matrices named as targets are trained in full, a tied
// pair once.
func TestUnslothEmbeddingTargets(t *testing.T) {
	untied := parseModel(t, tinyLlamaJSON)
	tied := parseModel(t, `{"model_type":"llama","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,
		"num_key_value_heads":2,"intermediate_size":128,"vocab_size":1000,"tie_word_embeddings":true}`)
	const attnLoRA, VH = 14336, 1000 * 64
	for _, tt := range []struct {
		name  string
		model *hfconfig.Model
		head  bool
		extra []string
		want  int64
	}{
		{"adapter on lm_head", untied, true, nil, attnLoRA + VH},
		{"lm_head and embed_tokens untied", untied, false, []string{"lm_head", "embed_tokens"}, attnLoRA + 2*VH},
		{"lm_head and embed_tokens tied", tied, true, []string{"embed_tokens"}, attnLoRA + VH},
		{"none", tied, false, nil, attnLoRA},
	} {
		e, err := Unsloth{}.Estimate(Request{Model: tt.model, Method: LoRA, LoRARank: 8, SeqLen: 10, Batch: 1, ExtraLoRAOnHead: tt.head, ExtraTrainable: tt.extra})
		if err != nil {
			t.Fatal(err)
		}
		if e.TrainableParams != tt.want {
			t.Errorf("%s: trainable %d, want %d", tt.name, e.TrainableParams, tt.want)
		}
	}
}

func TestUnslothOptimizerBytes(t *testing.T) {
	m := parseModel(t, tinyLlamaJSON)
	const trainable = 14336 // rank 8 on attention
	for opt, perParam := range map[string]int64{
		"adamw_8bit": 4, "adamw_torch": 6, "paged_adamw_32bit": 8, "sgd": 4, // §3's table
		"adamw_torch_fused": 6, "paged_adamw_8bit": 4, "adamw_bnb_8bit": 4, // Studio's additions
		"adamw": 6, "adafactor": 4, "lion_8bit": 4, // alias and Studio's fallback
	} {
		e, err := Unsloth{}.Estimate(Request{Model: m, Method: LoRA, LoRARank: 8, SeqLen: 10, Batch: 1, Optimizer: Optimizer(opt)})
		if err != nil {
			t.Fatal(err)
		}
		if o, _ := e.Component(COptimizer); o != trainable*perParam {
			t.Errorf("%s: optimizer %d, want %d B × %d", opt, o, perParam, trainable)
		}
	}
}

// Llama-2-7B from the catalog against seed 001's symbol table.
func TestUnslothLlama2_7B(t *testing.T) {
	m := catalogModel(t, "meta-llama/Llama-2-7b-hf")
	const H, L, V, heads, kvHeads, M = 4096, 32, 32000, 32, 32, 11008
	const K = H / heads * kvHeads
	const quantizable = ((H+K+K+H)*H + H*M*3) * L
	const nonQuant = 2*H*L + V*H + V*H // untied
	const r, S, B = 16, 2048, 4
	// all-linear: the seven modules of §2's table.
	const lora = (H*r + r*H + 2*(H*r+r*K) + H*r + r*H + 2*(H*r+r*M) + M*r + r*H) * L
	perLayer := int64(float64(S*B*(H+K+K)+S*B*2+S*B*(M+M)) * 2 * 1.25)
	weights := int64(quantizable*2/3.2 + nonQuant*2)
	optim := int64(lora * 4)
	want := map[ComponentID]int64{
		CWeights:     weights,
		CAdapters:    lora * 2,
		COptimizer:   optim,
		CGradients:   max(lora*2, min(int64(float64(weights)*0.15), max(perLayer, optim))),
		CActivations: perLayer, // unsloth checkpointing, LoRA: 1 layer
		COverhead:    1503238553,
	}
	e, err := Unsloth{}.Estimate(Request{Model: m, Method: QLoRA, Quant: "nf4", LoRARank: r, LoRATargets: []string{"all-linear"},
		SeqLen: S, Batch: B, GradCkpt: "unsloth", Optimizer: "adamw_8bit", GPUTotal: 24 * GiB})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, components(e)); d != "" {
		t.Errorf("components (-want +got):\n%s", d)
	}
	// 4.26 GiB weights, 0.65 GiB of activations and the 0.64 GiB gradient
	// floor: about 7.2 GiB in all on a 24 GiB card, a "yes".
	near(t, "Llama-2-7B QLoRA total", e.Total, 7.17, 0.01)
	if e.Verdict.Fit != FitYes || math.Abs(e.Verdict.Ratio-float64(e.Total)/(24*GiB)) > 1e-12 {
		t.Errorf("verdict %+v, want yes at total / 24 GiB", e.Verdict)
	}

	// Full fine-tuning, fp16 everything, adamw_torch: 2 + 2 + 6 B per param.
	full, err := Unsloth{}.Estimate(Request{Model: m, Method: Full, SeqLen: S, Batch: 1, GradCkpt: "full"})
	if err != nil {
		t.Fatal(err)
	}
	P := int64(quantizable + nonQuant)
	wantFull := map[ComponentID]int64{
		CWeights: 2 * P, COptimizer: 6 * P, CGradients: 2 * P, COverhead: 1503238553,
		CActivations: 2 * int64(float64(S*(H+K+K)+S*2+S*(M+M))*2*1.25),
	}
	if d := cmp.Diff(wantFull, components(full)); d != "" {
		t.Errorf("full FT components (-want +got):\n%s", d)
	}
}

// Mixtral-8x7B from the catalog: §1's MoE MLP term H·M·3·E + E·H, §2's
// experts × E for the MLP adapters, and §5's M for the experts a token passes.
func TestUnslothMixtral(t *testing.T) {
	m := catalogModel(t, "mistralai/Mixtral-8x7B-v0.1")
	const H, L, V, heads, kvHeads, M, E, topK = 4096, 32, 32000, 32, 8, 14336, 8, 2
	const K = H / heads * kvHeads
	const quantizable = ((H+K+K+H)*H + H*M*3*E + E*H) * L
	const nonQuant = 2*H*L + V*H + V*H
	const r, S = 8, 1024
	const lora = (H*r + r*H + 2*(H*r+r*K) + H*r + r*H + E*(2*(H*r+r*M)+M*r+r*H)) * L
	e, err := Unsloth{}.Estimate(Request{Model: m, Method: QLoRA, Quant: "nf4-dq", LoRARank: r, LoRATargets: []string{"all-linear"},
		SeqLen: S, Batch: 1, GradCkpt: "unsloth", Optimizer: "adamw_8bit"})
	if err != nil {
		t.Fatal(err)
	}
	got := components(e)
	divisor := 3.6
	if want := int64(float64(quantizable*2)/divisor + nonQuant*2); got[CWeights] != want {
		t.Errorf("weights %d, want %d", got[CWeights], want)
	}
	if got[CAdapters] != lora*2 {
		t.Errorf("adapters %d, want %d", got[CAdapters], lora*2)
	}
	if want := int64(float64(S*(H+K+K)+S*2+S*2*(M*topK)) * 2 * 1.25); got[CActivations] != want {
		t.Errorf("activations %d, want %d (M = moe width × %d experts per token)", got[CActivations], want, topK)
	}
}

// Sharding follows the project's model, before the fixed overhead, which
// every GPU pays once.
func TestUnslothSharding(t *testing.T) {
	m := catalogModel(t, "meta-llama/Llama-2-7b-hf")
	base := Request{Model: m, Method: Full, SeqLen: 512, Batch: 1, GradCkpt: "unsloth"}
	one, err := Unsloth{}.Estimate(base)
	if err != nil {
		t.Fatal(err)
	}
	base.Sharding = Sharding{Strategy: "zero2", GPUs: 4}
	four, err := Unsloth{}.Estimate(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []ComponentID{COptimizer, CGradients} {
		a, _ := one.Component(c)
		b, _ := four.Component(c)
		if b != (a+3)/4 {
			t.Errorf("zero2 ×4: %s = %d, want %d / 4", c, b, a)
		}
	}
	for _, c := range []ComponentID{CWeights, CActivations, COverhead} {
		a, _ := one.Component(c)
		b, _ := four.Component(c)
		if a != b {
			t.Errorf("zero2 ×4: %s = %d, want unchanged %d", c, b, a)
		}
	}
	if !four.PerGPU || four.Levels.Allocated != four.Total-1503238553 {
		t.Errorf("per GPU %v, allocated %d, total %d", four.PerGPU, four.Levels.Allocated, four.Total)
	}
}

func TestUnslothRegistered(t *testing.T) {
	e, err := ByName("unsloth")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := e.(Unsloth); !ok {
		t.Errorf("ByName(unsloth) = %T", e)
	}
	gb := 1.4
	if got := int64(gb * float64(GiB)); got != unslothCUDAOverhead {
		t.Errorf("CUDA overhead constant %d, want int(1.4·1024³) = %d", unslothCUDAOverhead, got)
	}
	// Invalid requests are refused the same way as by seed000.
	if _, err := (Unsloth{}).Estimate(Request{Model: parseModel(t, tinyLlamaJSON), SeqLen: 0, Batch: 1}); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("seq 0: err = %v", err)
	}
}

// Every catalog model under every method and checkpointing mode: the
// invariants of seed 001's sum hold and nothing is negative.
func TestUnslothCatalogInvariants(t *testing.T) {
	checked := 0
	for _, entry := range catalog.All() {
		m, err := hfconfig.Parse(entry.Config)
		if err != nil || m.Seq2Seq != nil {
			continue // encoders, encoder-decoders and configs the parser refuses reach no Unsloth estimate
		}
		checked++
		for _, method := range []Method{Full, LoRA, QLoRA} {
			for _, gc := range []string{"none", "full", "unsloth"} {
				for _, attn := range []string{"sdpa", "eager"} {
					req := Request{Model: m, Method: method, SeqLen: 2048, Batch: 2, GradCkpt: Checkpointing(gc), Attn: Attention(attn)}
					if method != Full {
						req.LoRATargets = []string{"all-linear"}
					}
					e, err := Unsloth{}.Estimate(req)
					if _, nerr := req.Normalize(); nerr != nil && method != Full {
						// A target list the parsed model cannot resolve is
						// refused before any estimator runs (hfconfig's
						// business, reported to seed000 alike).
						if err == nil {
							t.Errorf("%s %s: accepted a request Normalize refuses: %v", entry.ID, method, nerr)
						}
						continue
					}
					if err != nil {
						t.Fatalf("%s %s %s %s: %v", entry.ID, method, gc, attn, err)
					}
					var sum int64
					for _, c := range e.Components {
						if c.Bytes < 0 {
							t.Errorf("%s %s %s %s: %s = %d", entry.ID, method, gc, attn, c.Name, c.Bytes)
						}
						sum += c.Bytes
					}
					acts, _ := e.Component(CActivations)
					if sum != e.Total || e.Levels.Allocated != e.Total-unslothCUDAOverhead || acts == 0 {
						t.Errorf("%s %s %s %s: total %d, components %d, allocated %d, activations %d", entry.ID, method, gc, attn, e.Total, sum, e.Levels.Allocated, acts)
					}
					if method != Full && e.TrainableParams <= 0 {
						t.Errorf("%s %s: no trainable parameters", entry.ID, method)
					}
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d catalog models parsed; the sweep covers too little", checked)
	}
}

// Unsloth trains its llama-fied uploads of Phi-3-family models: the split
// projections take the LoRA targets its notebooks name, and the trainable
// counts are those the notebooks print (unslothai/notebooks bdda2efc,
// Phi_3.5_Mini-Conversational and Phi_4-Conversational: 29,884,416 and
// 65,536,000 at rank 16 on all seven projections).
func TestUnslothLlamafiesPhi3(t *testing.T) {
	all7 := []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
	for _, tt := range []struct {
		id   string
		want int64
	}{{"microsoft/Phi-3.5-mini-instruct", 29_884_416}, {"microsoft/phi-4", 65_536_000}} {
		m := catalogModel(t, tt.id)
		m.Name = tt.id
		r := Request{Model: m, Method: QLoRA, LoRARank: 16, LoRATargets: all7, SeqLen: 2048, Batch: 2}
		StackUnsloth.Spec().Apply(&r)
		e := est(t, r)
		if e.TrainableParams != tt.want {
			t.Errorf("%s: %d trainable, want the notebook's %d", tt.id, e.TrainableParams, tt.want)
		}
		hf := r
		hf.Stack = StackHFTrainer
		if _, err := hf.Normalize(); err == nil {
			t.Errorf("%s on hf-trainer: q_proj resolved on the fused model", tt.id)
		}
		// A checkpoint Unsloth does not map to its uploads is loaded fused.
		other := *m
		other.Name = "someone/phi-finetune"
		o := r
		o.Model = &other
		if _, err := o.Normalize(); err == nil {
			t.Errorf("%s as an unmapped checkpoint on unsloth: q_proj resolved on the fused model", tt.id)
		}
	}
}
