package report

// valueHints say what a value people write for an option means here, when
// it is refused and the list of accepted values alone does not tell which
// to choose (--precision bf16 is two precisions); keyed by flag, then value.
var valueHints = map[string]map[string]string{
	"--precision": {
		"bf16": "bf16 is two precisions here: bf16-mixed keeps fp32 master weights under autocast " +
			"(transformers' bf16=True on a model loaded in fp32; DeepSpeed's bf16, whose fp32 copy is the ZeRO optimizer's); " +
			"bf16-true holds weights, gradients and optimizer states in bf16 (torchtune's dtype=bf16, litgpt's bf16-true, " +
			"and transformers' bf16=True on a model loaded in bf16 for full fine-tuning). " +
			"LoRA on a bf16-loaded base with PEFT's fp32 adapters is bf16-mixed under the Trainer's autocast, " +
			"bf16-true in a loop without autocast.",
		"fp16": "fp16 is two precisions here: fp16-mixed keeps fp32 master weights under autocast " +
			"(transformers' fp16=True, DeepSpeed's fp16); fp16-true holds everything in fp16.",
		"bfloat16": "write bf16-mixed (fp32 master weights, autocast) or bf16-true (everything in bf16).",
		"float16":  "write fp16-mixed (fp32 master weights, autocast) or fp16-true (everything in fp16).",
		"float32":  "write fp32.",
	},
	"--quant": {
		"4bit": "4bit is bitsandbytes' load_in_4bit, whose default bnb_4bit_quant_type is fp4; " +
			"QLoRA's recipe is nf4 with double quantization (nf4-dq, the default here).",
		"8bit":         "8bit is bitsandbytes' load_in_8bit: write int8.",
		"bnb_4bit":     "write nf4, nf4-dq (with bnb_4bit_use_double_quant) or fp4, as bnb_4bit_quant_type says.",
		"load_in_4bit": "load_in_4bit defaults to bnb_4bit_quant_type fp4; QLoRA's recipe is nf4-dq.",
	},
}

// ValueHint says which option a refused value of a flag ("--precision")
// most likely means, or "" when the accepted values say enough. The CLI
// prints it after kong's refusal; the web API sends it as the problem's
// hint.
func ValueHint(flag, value string) string { return valueHints[flag][value] }
