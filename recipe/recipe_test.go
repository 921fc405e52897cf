package recipe

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/catalog"
	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/hfconfig"
	"github.com/canifinetune/canifinetune/plan"
	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

func catalogModel(t testing.TB, id string) *hfconfig.Model {
	t.Helper()
	e, err := catalog.Lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	m, err := hfconfig.Parse(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// chosen builds the plan a search would return for req on nodes ×
// perNode GPUs of 80 GiB: the normalized request and its estimate.
func chosen(t testing.TB, id string, req estimate.Request, nodes, perNode int64) plan.Plan {
	t.Helper()
	req.Model = catalogModel(t, id)
	req.GPUTotal = 80 * estimate.GiB
	q, err := req.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	return planOf(t, q, nodes, perNode)
}

// planOf is the plan of a normalized request on nodes × perNode GPUs.
func planOf(t testing.TB, q estimate.Request, nodes, perNode int64) plan.Plan {
	t.Helper()
	est, err := estimate.ByName("")
	if err != nil {
		t.Fatal(err)
	}
	e, err := est.Estimate(q)
	if err != nil {
		t.Fatal(err)
	}
	return plan.Plan{Request: q, Estimate: e, Nodes: nodes, GPUsPerNode: perNode, World: nodes * perNode,
		MicroBatch: q.Batch, GradAccum: max(q.GradAccum, 1)}
}

func ptr[T any](v T) *T { return &v }

// cases are the plans the golden files and the settings test cover: one
// of each stack layout the recipes emit.
func cases(t testing.TB) map[string]Input {
	const qwen, llama8, llama70 = "Qwen/Qwen2.5-7B", "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B"
	return map[string]Input{
		"lora-1gpu": {ModelID: qwen, Epochs: 1, Plan: chosen(t, qwen, estimate.Request{Method: estimate.LoRA, LoRARank: 16,
			SeqLen: 2048, Batch: 2, GradAccum: 8, GradCkpt: estimate.CkptFull}, 1, 1)},
		"qlora-1gpu": {ModelID: qwen, Epochs: 2, Plan: chosen(t, qwen, estimate.Request{Method: estimate.QLoRA, LoRARank: 64,
			LoRATargets: []string{"all-linear"}, LoRADropout: ptr(0.05), SeqLen: 4096, Batch: 1, GradAccum: 16, GradCkpt: estimate.CkptFull,
			FusedCE: estimate.LossLiger, Optimizer: estimate.PagedAdamW8bit, Precision: estimate.BF16Mixed}, 1, 1)},
		"ddp-lora-2gpu": {ModelID: llama8, Epochs: 1, Plan: chosen(t, llama8, estimate.Request{Method: estimate.LoRA, LoRARank: 8,
			SeqLen: 1024, Batch: 4, GradAccum: 2, Attn: estimate.FlashAttention2, DynamicShapes: true,
			Kernels:  []estimate.Kernel{estimate.KernelLigerRMSNorm, estimate.KernelLigerSwiGLU},
			Sharding: estimate.Sharding{Strategy: estimate.DDP, GPUs: 2}}, 1, 2)},
		"fsdp-full-4gpu": {ModelID: llama8, Epochs: 3, Plan: chosen(t, llama8, estimate.Request{Method: estimate.Full,
			Precision: estimate.BF16Mixed, SeqLen: 2048, Batch: 1, GradAccum: 4, GradCkpt: estimate.CkptFull,
			Sharding: estimate.Sharding{Strategy: estimate.FSDPFullShard, GPUs: 4}}, 1, 4)},
		"zero3-offload-2x8": {ModelID: llama70, Epochs: 1, Plan: chosen(t, llama70, estimate.Request{Method: estimate.Full,
			Precision: estimate.BF16Mixed, SeqLen: 4096, Batch: 1, GradAccum: 4, GradCkpt: estimate.CkptFull,
			Sharding: estimate.Sharding{Strategy: estimate.ZeRO3, GPUs: 16, CPUOffload: estimate.OffloadParamsOptimizer}}, 2, 8)},
		"fsdp-hybrid-qlora-2x4": {ModelID: llama70, Epochs: 1, Plan: chosen(t, llama70, estimate.Request{Method: estimate.QLoRA, LoRARank: 16,
			QuantStorage: estimate.DtypeBF16, SeqLen: 2048, Batch: 1, GradAccum: 2, GradCkpt: estimate.CkptFull,
			Sharding: estimate.Sharding{Strategy: estimate.FSDPHybridShard, GPUs: 4, CPUOffload: estimate.OffloadParamsOptimizer}}, 2, 4)},
		"zero2-qlora-8gpu": {ModelID: llama8, Epochs: 1, Plan: chosen(t, llama8, estimate.Request{Method: estimate.QLoRA, LoRARank: 16,
			SeqLen: 2048, Batch: 2, GradAccum: 1, Precision: estimate.FP16Mixed, Optimizer: estimate.AdamW8bit,
			Sharding: estimate.Sharding{Strategy: estimate.ZeRO2, GPUs: 8}}, 1, 8)},
	}
}

// TestGolden pins every emitted file of every case.
func TestGolden(t *testing.T) {
	for name, in := range cases(t) {
		t.Run(name, func(t *testing.T) {
			files, err := Files(in)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join("testdata", name)
			if *update {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				for n, b := range files {
					if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatalf("%v (run go test ./recipe -update)", err)
			}
			var onDisk []string
			for _, e := range entries {
				onDisk = append(onDisk, e.Name())
			}
			got := Names(files)
			slices.Sort(got)
			if d := cmp.Diff(onDisk, got); d != "" {
				t.Errorf("files (-golden +emitted):\n%s", d)
			}
			for n, b := range files {
				want, err := os.ReadFile(filepath.Join(dir, n))
				if err != nil {
					continue // reported above
				}
				if d := cmp.Diff(string(want), string(b)); d != "" {
					t.Errorf("%s (-golden +emitted):\n%s", n, d)
				}
			}
		})
	}
}

// parseYAML reads the accelerate config: "key: value" lines and one level
// of nested maps, as accelerateYAML writes them.
func parseYAML(t *testing.T, b []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "#") || strings.TrimSpace(line) == "" {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			t.Fatalf("yaml line %q has no key", line)
		}
		v = strings.Trim(strings.TrimSpace(v), "'")
		if strings.HasPrefix(line, "  ") {
			out[section+"."+k] = v
			continue
		}
		if v == "" {
			section = k
			continue
		}
		out[k] = v
	}
	return out
}

func decode[T any](t *testing.T, files map[string][]byte, name string) T {
	t.Helper()
	var v T
	b, ok := files[name]
	if !ok {
		t.Fatalf("no %s", name)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return v
}

// TestSettingsMatchRequest reads every emitted file back and compares each
// memory-relevant setting with the plan's request, derived here from the
// request independently of the writer.
func TestSettingsMatchRequest(t *testing.T) {
	for name, in := range cases(t) {
		t.Run(name, func(t *testing.T) {
			files, err := Files(in)
			if err != nil {
				t.Fatal(err)
			}
			r, p := in.Plan.Request, in.Plan
			spec := r.Sharding.Strategy.Spec()
			args := decode[TrainingArgs](t, files, FileTrainingArgs)
			sft := decode[SFTConfig](t, files, FileSFTConfig)
			if d := cmp.Diff(args, sft.TrainingArgs); d != "" {
				t.Errorf("the TRL and HF scripts train differently (-hf +trl):\n%s", d)
			}
			bf16 := r.Precision == estimate.BF16Mixed || r.Precision == estimate.BF16True
			fp16 := r.Precision == estimate.FP16Mixed
			check := func(what string, got, want any) {
				t.Helper()
				if !cmp.Equal(got, want) {
					t.Errorf("%s = %v, the plan has %v", what, got, want)
				}
			}
			check("per_device_train_batch_size", args.PerDeviceTrainBatchSize, r.Batch)
			check("gradient_accumulation_steps", args.GradientAccumulationSteps, max(r.GradAccum, 1))
			check("bf16", args.BF16, bf16)
			check("fp16", args.FP16, fp16)
			fsdpCkpt := args.FSDPConfig != nil && args.FSDPConfig.ActivationCheckpointing
			check("activation_checkpointing_kwargs given", args.GradientCheckpointingKwargs != nil, args.GradientCheckpointing)
			check("checkpointed by both the model and FSDP", args.GradientCheckpointing && fsdpCkpt, false)
			check("checkpointing", args.GradientCheckpointing || fsdpCkpt, r.GradCkpt == estimate.CkptFull)
			check("optim", args.Optim, string(r.Optimizer))
			check("use_liger_kernel", args.UseLigerKernel, r.FusedCE == estimate.LossLiger || len(r.Kernels) > 0)
			if args.UseLigerKernel {
				check("liger fused_linear_cross_entropy", args.LigerKernelConfig["fused_linear_cross_entropy"], r.FusedCE == estimate.LossLiger)
				check("liger cross_entropy", args.LigerKernelConfig["cross_entropy"], false)
				check("liger rms_norm", args.LigerKernelConfig["rms_norm"], slices.Contains(r.Kernels, estimate.KernelLigerRMSNorm))
				check("liger swiglu", args.LigerKernelConfig["swiglu"], slices.Contains(r.Kernels, estimate.KernelLigerSwiGLU))
				check("liger rope", args.LigerKernelConfig["rope"], slices.Contains(r.Kernels, estimate.KernelLigerRoPE))
			}
			check("max_length", sft.MaxLength, r.SeqLen)
			check("packing", sft.Packing, !r.DynamicShapes)
			check("num_train_epochs", args.NumTrainEpochs, in.Epochs)

			m := decode[ModelSpec](t, files, FileModel)
			check("attn_implementation", m.AttnImplementation, string(r.Attn))
			check("method", m.Method, string(r.Method))
			check("seq_len", m.SeqLen, r.SeqLen)
			wantDtype := map[bool]string{true: "float32", false: map[bool]string{true: "bfloat16", false: "float16"}[bf16]}[r.Method == estimate.Full && r.Precision.Spec().MasterWeights || r.Precision == estimate.FP32]
			check("dtype", m.Dtype, wantDtype)
			if r.Method == estimate.QLoRA {
				q := m.Quantization
				if q == nil {
					t.Fatal("qlora without a quantization config")
				}
				check("load_in_4bit", q.LoadIn4bit, r.Quant.Spec().BitsPerWeight == 4)
				check("bnb_4bit_use_double_quant", q.UseDoubleQuant, r.Quant.Spec().DoubleQuant)
				check("prepare_model_for_kbit_training", m.PrepareKbit, r.UpcastFrozen == nil || *r.UpcastFrozen)
			} else if m.Quantization != nil {
				t.Errorf("%s with a quantization config", r.Method)
			}
			if r.Method != estimate.Full {
				l := decode[LoRA](t, files, FileLoRA)
				check("r", l.R, r.LoRARank)
				dropout := 0.0
				if r.LoRADropout != nil {
					dropout = *r.LoRADropout
				}
				check("lora_dropout", l.LoRADropout, dropout)
				want := r.Model.AttentionTargets()
				if slices.Contains(r.LoRATargets, hfconfig.ScopeAllLinear) {
					want = r.Model.AllLinearTargets()
				}
				check("target_modules", l.TargetModules, want)
			} else if _, ok := files[FileLoRA]; ok {
				t.Error("a full fine-tune with a LoRA config")
			}

			y := parseYAML(t, files[FileAccelerate])
			check("num_processes", y["num_processes"], strconv.FormatInt(p.World, 10))
			check("num_machines", y["num_machines"], strconv.FormatInt(p.Nodes, 10))
			wantType := map[string]string{"": "NO", estimate.FamilyTorchDDP: "MULTI_GPU", estimate.FamilyFSDP: "FSDP", estimate.FamilyDeepSpeed: "DEEPSPEED"}[spec.Family]
			check("distributed_type", y["distributed_type"], wantType)
			check("mixed_precision", y["mixed_precision"], map[bool]string{true: "bf16", false: map[bool]string{true: "fp16", false: "no"}[fp16]}[bf16])
			off := r.Sharding.CPUOffload.Spec()
			if spec.Family == estimate.FamilyFSDP {
				want := map[estimate.Strategy]string{estimate.FSDPFullShard: "FULL_SHARD", estimate.FSDPShardGradOp: "SHARD_GRAD_OP", estimate.FSDPNoShard: "NO_SHARD", estimate.FSDPHybridShard: "HYBRID_SHARD"}[r.Sharding.Strategy]
				check("fsdp_offload_params", y["fsdp_config.fsdp_offload_params"], strconv.FormatBool(off.Params))
				check("training args fsdp", args.FSDP, true)
				f := args.FSDPConfig
				check("fsdp_config cpu_offload", f.CPUOffload, off.Params)
				switch r.Sharding.Strategy {
				case estimate.FSDPFullShard, estimate.FSDPShardGradOp:
					check("fsdp_config version", f.Version, 2)
					check("fsdp_config reshard_after_forward", f.ReshardAfterForward, r.Sharding.Strategy == estimate.FSDPFullShard)
					check("fsdp_reshard_after_forward", y["fsdp_config.fsdp_reshard_after_forward"], strconv.FormatBool(r.Sharding.Strategy == estimate.FSDPFullShard))
				default:
					check("fsdp_config version", f.Version, 1)
					check("fsdp_config reshard_after_forward", f.ReshardAfterForward, strings.ToLower(want))
					check("fsdp_sharding_strategy", y["fsdp_config.fsdp_sharding_strategy"], want)
				}
			}
			ds, hasDS := files[FileDeepSpeed]
			if hasDS != (spec.Family == estimate.FamilyDeepSpeed) {
				t.Fatalf("ds_config.json written: %v, for sharding %s", hasDS, r.Sharding.Strategy)
			}
			if hasDS {
				var c map[string]any
				if err := json.Unmarshal(ds, &c); err != nil {
					t.Fatal(err)
				}
				z := c["zero_optimization"].(map[string]any)
				check("stage", z["stage"], float64(spec.Shards))
				_, offOpt := z["offload_optimizer"]
				_, offParam := z["offload_param"]
				check("offload_optimizer", offOpt, off.Optimizer)
				check("offload_param", offParam, off.Params)
				check("train_micro_batch_size_per_gpu", c["train_micro_batch_size_per_gpu"], float64(r.Batch))
				check("gradient_accumulation_steps", c["gradient_accumulation_steps"], float64(max(r.GradAccum, 1)))
				check("train_batch_size", c["train_batch_size"], float64(r.Batch*max(r.GradAccum, 1)*p.World))
				_, bfOn := c["bf16"]
				_, fpOn := c["fp16"]
				check("bf16.enabled", bfOn, bf16)
				check("fp16.enabled", fpOn, fp16)
				check("training args deepspeed", args.DeepSpeed, FileDeepSpeed)
				check("accelerate deepspeed_config_file", y["deepspeed_config.deepspeed_config_file"], FileDeepSpeed)
			}
			launch := string(files[FileLaunch])
			if !strings.Contains(launch, "--nproc_per_node="+strconv.FormatInt(p.GPUsPerNode, 10)) ||
				!strings.Contains(launch, "--nnodes="+strconv.FormatInt(p.Nodes, 10)) {
				t.Errorf("launch.sh does not start %d × %d processes:\n%s", p.Nodes, p.GPUsPerNode, launch)
			}
		})
	}
}

// TestRefuses: a setting the stacks cannot reproduce is refused by name,
// never replaced.
func TestRefuses(t *testing.T) {
	const id = "Qwen/Qwen2.5-7B"
	for _, c := range []struct {
		name  string
		req   estimate.Request
		nodes int64
		gpus  int64
		want  string
	}{
		{"unsloth checkpointing", estimate.Request{GradCkpt: estimate.CkptUnsloth, SeqLen: 1024, Batch: 1}, 1, 1, "gradient checkpointing unsloth"},
		{"activation offload", estimate.Request{GradCkpt: estimate.CkptOffload, SeqLen: 1024, Batch: 1}, 1, 1, "gradient checkpointing offload"},
		{"chunked loss", estimate.Request{FusedCE: estimate.LossChunked, SeqLen: 1024, Batch: 1}, 1, 1, "loss kernel chunked"},
		{"bf16-true under zero", estimate.Request{Method: estimate.Full, Precision: estimate.BF16True, SeqLen: 1024, Batch: 1,
			Sharding: estimate.Sharding{Strategy: estimate.ZeRO2, GPUs: 4}}, 1, 4, "precision bf16-true"},
		{"8-bit optimizer offloaded", estimate.Request{Method: estimate.Full, Precision: estimate.BF16Mixed, SeqLen: 1024, Batch: 1, Optimizer: estimate.AdamW8bit,
			Sharding: estimate.Sharding{Strategy: estimate.ZeRO2, GPUs: 4, CPUOffload: estimate.OffloadOptimizer}}, 1, 4, "optimizer adamw_8bit"},
		{"bf16 states beside fp32 params", estimate.Request{Method: estimate.Full, Precision: estimate.BF16Mixed, OptimizerStateDtype: estimate.DtypeBF16, SeqLen: 1024, Batch: 1}, 1, 1, "optimizer state dtype bf16"},
		{"uint8 packed weights sharded", estimate.Request{Method: estimate.QLoRA, SeqLen: 1024, Batch: 1,
			Sharding: estimate.Sharding{Strategy: estimate.FSDPFullShard, GPUs: 2}}, 1, 2, "quant storage uint8"},
		{"fms-acceleration kernels", estimate.Request{Kernels: []estimate.Kernel{estimate.KernelFOAK}, Method: estimate.QLoRA, SeqLen: 1024, Batch: 1}, 1, 1, "kernel foak"},
		{"optimizer in backward", estimate.Request{Method: estimate.Full, Precision: estimate.BF16True, OptimizerInBackward: true, SeqLen: 1024, Batch: 1}, 1, 1, "optimizer in backward true"},
		{"gptq base", estimate.Request{Method: estimate.QLoRA, Quant: estimate.GPTQ4, SeqLen: 1024, Batch: 1}, 1, 1, "quantization gptq"},
		{"classification head", estimate.Request{Task: estimate.TaskClassification, SeqLen: 1024, Batch: 1}, 1, 1, "task sequence-classification"},
		{"modules_to_save", estimate.Request{ExtraTrainable: []string{"lm_head"}, SeqLen: 1024, Batch: 1}, 1, 1, "extra trainable modules lm_head"},
		{"llama-factory's own config", estimate.Request{Stack: estimate.StackLlamaFactory, SeqLen: 1024, Batch: 1}, 1, 1, "stack llama-factory"},
		{"a plain loop's own loss", estimate.Request{Stack: estimate.StackPyTorch, SeqLen: 1024, Batch: 1}, 1, 1, "stack pytorch"},
		{"SDPA's math kernel", estimate.Request{Attn: estimate.SDPAMath, SeqLen: 1024, Batch: 1}, 1, 1, "attention sdpa_math"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Files(Input{ModelID: id, Plan: chosen(t, id, c.req, c.nodes, c.gpus)})
			if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an ErrUnsupported naming %q", err, c.want)
			}
		})
	}
}

// TestRefusesNonCausalModels: the scripts load AutoModelForCausalLM, so a
// plan for an encoder-decoder or encoder-only model is refused by name.
func TestRefusesNonCausalModels(t *testing.T) {
	for _, c := range []struct{ id, want string }{
		{"google-t5/t5-small", "model t5: an encoder-decoder model"},
		{"FacebookAI/xlm-roberta-base", "model xlm-roberta: an encoder-only model"},
	} {
		req := estimate.Request{SeqLen: 512, Batch: 1}
		_, err := Files(Input{ModelID: c.id, Plan: chosen(t, c.id, req, 1, 1)})
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an ErrUnsupported naming %q", c.id, err, c.want)
		}
	}
}

// TestMoEAllLinearTargets: GPT-OSS's routed experts are 3-D parameters
// PEFT's target_modules cannot name, so its all-linear recipe adapts the
// attention and names no expert projection.
func TestMoEAllLinearTargets(t *testing.T) {
	const id = "openai/gpt-oss-20b"
	files, err := Files(Input{ModelID: id, Plan: chosen(t, id, estimate.Request{SeqLen: 512, Batch: 1, LoRATargets: []string{"all-linear"}}, 1, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, b := range files {
		all.Write(b)
	}
	if !strings.Contains(all.String(), "q_proj") || strings.Contains(all.String(), "gate_up_proj") {
		t.Errorf("GPT-OSS all-linear recipe: want q_proj and no gate_up_proj among its targets")
	}
}

// TestRejectsInconsistentPlan: a plan whose layout disagrees with its
// request is an error, not a recipe of either.
func TestRejectsInconsistentPlan(t *testing.T) {
	const id = "Qwen/Qwen2.5-7B"
	p := chosen(t, id, estimate.Request{SeqLen: 1024, Batch: 2, GradAccum: 4}, 1, 1)
	bad := p
	bad.MicroBatch = 4
	if _, err := Files(Input{ModelID: id, Plan: bad}); err == nil || !strings.Contains(err.Error(), "micro-batch") {
		t.Errorf("micro-batch mismatch: %v", err)
	}
	bad = p
	bad.World, bad.GPUsPerNode = 2, 2
	if _, err := Files(Input{ModelID: id, Plan: bad}); err == nil || !strings.Contains(err.Error(), "data-parallel") {
		t.Errorf("2 GPUs without a strategy: %v", err)
	}
	if _, err := Files(Input{ModelID: " ", Plan: p}); err == nil {
		t.Error("no model id: no error")
	}
}
