package bench

// PEFTTargets turns estimate's LoRA target list into the module names the
// probe hands PEFT. The scopes estimate knows become the names Llama-style
// models (Llama, Qwen, Mistral, Gemma) use; other families need module
// names, or all-linear, which PEFT resolves itself. No targets means
// "attention", estimate's default.
func PEFTTargets(targets []string) []string {
	if len(targets) == 0 {
		targets = []string{"attention"}
	}
	var out []string
	for _, t := range targets {
		switch t {
		case "attention":
			out = append(out, "q_proj", "k_proj", "v_proj", "o_proj")
		case "mlp":
			out = append(out, "gate_proj", "up_proj", "down_proj")
		default:
			out = append(out, t)
		}
	}
	return out
}
