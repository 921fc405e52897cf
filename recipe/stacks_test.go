package recipe

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/estimate"
)

// yamlValues reads "key: value" lines of a flat or nested YAML file into
// dotted keys (enough for the configs written here).
func yamlValues(b []byte) map[string]string {
	out := map[string]string{}
	var stack []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		depth := (len(line) - len(strings.TrimLeft(line, " "))) / 2
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		stack = append(stack[:min(depth, len(stack))], k)
		out[strings.Join(stack, ".")] = strings.TrimSpace(v)
	}
	return out
}

// TestOwnStacks: a plan made with --stack litgpt or torchtune is written as
// that framework's config, each memory-relevant setting read back here.
func TestOwnStacks(t *testing.T) {
	const qwen, llama8 = "Qwen/Qwen2.5-7B", "meta-llama/Llama-3.1-8B"
	lit := estimate.StackLitGPT.Spec()
	tt := estimate.StackTorchtune.Spec()
	withStack := func(st estimate.Stack, r estimate.Request) estimate.Request { st.Apply(&r); return r }

	in := Input{ModelID: qwen, Plan: chosen(t, qwen, withStack(lit, estimate.Request{Method: estimate.QLoRA, LoRARank: 32,
		LoRATargets: []string{"all-linear"}, SeqLen: 2048, Batch: 2, GradAccum: 4, GradCkpt: estimate.CkptNone}), 1, 1)}
	files, err := Files(in)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := files[FileTRL]; ok {
		t.Error("a LitGPT plan also wrote the Trainer scripts")
	}
	v := yamlValues(files[FileLitGPT])
	for k, want := range map[string]string{"precision": "bf16-true", "quantize": "bnb.nf4-dq", "devices": "1", "num_nodes": "1",
		"lora_r": "32", "lora_query": "true", "lora_key": "true", "lora_value": "true", "lora_projection": "true", "lora_mlp": "true", "lora_head": "false",
		"lora_dropout": "0.05", "train.micro_batch_size": "2", "train.global_batch_size": "8", "train.max_seq_length": "2048",
		"optimizer.class_path": "torch.optim.AdamW"} {
		if v[k] != want {
			t.Errorf("litgpt.yaml %s = %q, want %q", k, v[k], want)
		}
	}

	in = Input{ModelID: llama8, Plan: chosen(t, llama8, withStack(tt, estimate.Request{Method: estimate.Full, SeqLen: 4096, Batch: 1, GradAccum: 2,
		GradCkpt: estimate.CkptOffload, Sharding: estimate.Sharding{Strategy: estimate.FSDPShardGradOp, GPUs: 8, CPUOffload: estimate.OffloadParamsOptimizer}}), 1, 8)}
	files, err = Files(in)
	if err != nil {
		t.Fatal(err)
	}
	v = yamlValues(files[FileTorchtune])
	for k, want := range map[string]string{"dtype": "bf16", "batch_size": "1", "gradient_accumulation_steps": "2", "tokenizer.max_seq_len": "4096",
		"model._component_": "torchtune.models.llama3_1.llama3_1_8b", "enable_activation_checkpointing": "true", "enable_activation_offloading": "true",
		"fsdp_reshard_after_forward": "false", "fsdp_cpu_offload": "true", "optimizer._component_": "torch.optim.AdamW", "dataset.packed": "true",
		"loss._component_": "torch.nn.CrossEntropyLoss"} {
		if v[k] != want {
			t.Errorf("torchtune.yaml %s = %q, want %q", k, v[k], want)
		}
	}
	if l := string(files[FileLaunch]); !strings.Contains(l, "tune run --nproc_per_node=8 full_finetune_distributed") {
		t.Errorf("launch.sh runs no full_finetune_distributed on 8 GPUs:\n%s", l)
	}

	for _, c := range []struct {
		name string
		st   estimate.Stack
		req  estimate.Request
		gpus int64
		want string
	}{
		{"litgpt checkpointing on one GPU", lit, estimate.Request{SeqLen: 1024, Batch: 1, GradCkpt: estimate.CkptFull}, 1, "gradient checkpointing full"},
		{"litgpt ddp", lit, estimate.Request{SeqLen: 1024, Batch: 1, GradCkpt: estimate.CkptFull, Sharding: estimate.Sharding{Strategy: estimate.DDP, GPUs: 2}}, 2, "sharding ddp"},
		{"litgpt liger", lit, estimate.Request{SeqLen: 1024, Batch: 1, FusedCE: estimate.LossLiger}, 1, "loss kernel liger"},
		{"litgpt mlp subset", lit, estimate.Request{SeqLen: 1024, Batch: 1, LoRATargets: []string{"q_proj", "up_proj"}}, 1, "LoRA targets up_proj"},
		{"torchtune mixed precision", tt, estimate.Request{SeqLen: 1024, Batch: 1, Precision: estimate.BF16Mixed, OptimizerStateDtype: estimate.DtypeFP32}, 1, "precision bf16-mixed"},
		{"torchtune 8-bit optimizer over FSDP", tt, estimate.Request{Method: estimate.Full, SeqLen: 1024, Batch: 1, Optimizer: estimate.PagedAdamW8bit, Sharding: estimate.Sharding{Strategy: estimate.FSDPFullShard, GPUs: 2}}, 2, "optimizer paged_adamw_8bit"},
		{"torchtune zero", tt, estimate.Request{Method: estimate.Full, SeqLen: 1024, Batch: 1, Precision: estimate.BF16True, Sharding: estimate.Sharding{Strategy: estimate.ZeRO3, GPUs: 2}}, 2, "sharding zero3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Files(Input{ModelID: qwen, Plan: chosen(t, qwen, withStack(c.st, c.req), 1, c.gpus)})
			if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an ErrUnsupported naming %q", err, c.want)
			}
		})
	}
}

// torchao's AdamW8bit is written by the name each framework reads it by:
// torchtune's config takes the class, the Trainer its optim name.
func TestTorchaoOptimizerNames(t *testing.T) {
	const llama3 = "meta-llama/Llama-3.1-8B"
	tt := estimate.StackTorchtune.Spec()
	r := estimate.Request{Method: estimate.Full, SeqLen: 2048, Batch: 1, GradCkpt: estimate.CkptFull}
	tt.Apply(&r)
	r.Optimizer = estimate.AOAdamW8bit
	files, err := Files(Input{ModelID: llama3, Plan: chosen(t, llama3, r, 1, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if got := yamlValues(files[FileTorchtune])["optimizer._component_"]; got != "torchao.optim.AdamW8bit" {
		t.Errorf("torchtune.yaml optimizer._component_ = %q, want torchao.optim.AdamW8bit", got)
	}
	hf := estimate.Request{Method: estimate.Full, SeqLen: 2048, Batch: 1, GradCkpt: estimate.CkptFull, Optimizer: estimate.AOAdamW8bit, Precision: estimate.BF16Mixed}
	files, err = Files(Input{ModelID: llama3, Plan: chosen(t, llama3, hf, 1, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var args struct{ Optim string }
	if err := json.Unmarshal(files[FileTrainingArgs], &args); err != nil {
		t.Fatal(err)
	}
	if args.Optim != "adamw_torch_8bit" {
		t.Errorf("training_args.json optim = %q, want transformers' adamw_torch_8bit", args.Optim)
	}
}

// A plan over Unsloth's llama-fied Phi upload is not written as Trainer
// scripts, which would load the fused checkpoint and adapt other modules.
func TestRefusesLlamafiedModel(t *testing.T) {
	const phi = "microsoft/Phi-3.5-mini-instruct"
	m := catalogModel(t, phi)
	m.Name = phi // as modelsource names a resolved model
	r := estimate.Request{Model: m, Method: estimate.LoRA, LoRARank: 16, LoRATargets: []string{"all-linear"}, SeqLen: 2048, Batch: 1, GPUTotal: 80 * estimate.GiB}
	estimate.StackUnsloth.Spec().Apply(&r)
	r.GradCkpt, r.FusedCE = estimate.CkptFull, estimate.LossNone
	q, err := r.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	if q.Model.LlamafiedFrom != "phi3" {
		t.Fatalf("the unsloth stack did not llama-fy %s", phi)
	}
	_, err = Files(Input{ModelID: phi, Plan: planOf(t, q, 1, 1)})
	if err == nil || !strings.Contains(err.Error(), "llama-fied") {
		t.Errorf("want a refusal naming the llama-fied upload, got %v", err)
	}
}
