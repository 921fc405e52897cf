package estimate

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// unknownWords are references a user cannot open: internal specification
// numbers, section signs, issue numbers, the sibling data directory, and
// empty parentheses left by an unset field.
var unknownWords = regexp.MustCompile(`(?i)seed ?0|§|issue #?[0-9]|shared/|\(\)`)

// docAnchor is a reference to a section of the memory-model document.
var docAnchor = regexp.MustCompile(`docs/memory-model\.md#([a-z0-9-]+)`)

// headingAnchors are the anchors GitHub gives the headings of a Markdown file:
// lower case, spaces to hyphens, other punctuation dropped.
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var a strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
				a.WriteRune(r)
			}
		}
		anchors[a.String()] = true
	}
	return anchors
}

// Every component source and assumption of every estimator names a method or
// a source a user can open, and every section it points to exists.
func TestSourcesNameWhatAUserCanOpen(t *testing.T) {
	anchors := headingAnchors(t, "../docs/memory-model.md")
	qwen := catalogModel(t, "Qwen/Qwen2.5-7B")
	mixtral := catalogModel(t, "mistralai/Mixtral-8x7B-v0.1")
	gpt2 := catalogModel(t, "openai-community/gpt2")
	reqs := map[string]Request{
		"lora, no stack, GPU":    {Model: qwen, Method: LoRA, SeqLen: 2048, Batch: 1, GPUTotal: 24 * GiB},
		"qlora, ckpt, GPU":       {Model: qwen, Method: QLoRA, SeqLen: 2048, Batch: 1, GradCkpt: "full", GPUTotal: 24 * GiB},
		"qlora int8, no GPU":     {Model: mixtral, Method: QLoRA, Quant: "int8", SeqLen: 1024, Batch: 1},
		"full, zero3, 8-bit":     {Model: qwen, Method: Full, Precision: BF16Mixed, Optimizer: "adamw_8bit", SeqLen: 1024, Batch: 1, GPUTotal: 80 * GiB, Sharding: Sharding{Strategy: "zero3", GPUs: 8}},
		"full, sgd, fused ce":    {Model: gpt2, Method: Full, Optimizer: "sgd", FusedCE: "liger", SeqLen: 512, Batch: 4, GPUTotal: 16 * GiB},
		"lora, eager, stack":     {Model: gpt2, Method: LoRA, Attn: "eager", Stack: "litgpt", SeqLen: 512, Batch: 2, GPUTotal: 16 * GiB},
		"lora, adafactor, accum": {Model: qwen, Method: LoRA, Optimizer: "adafactor", GradAccum: 4, SeqLen: 512, Batch: 1, GPUTotal: 24 * GiB},
	}
	for _, name := range Names() {
		est, err := ByName(name)
		if err != nil {
			t.Fatal(err)
		}
		for what, req := range reqs {
			if req.Stack != "" {
				st, err := StackByName(string(req.Stack))
				if err != nil {
					t.Fatal(err)
				}
				st.Apply(&req)
			}
			e, err := est.Estimate(req)
			if err != nil {
				continue // an estimator may refuse a request (unsloth: int8)
			}
			texts := append([]string(nil), e.Assumptions...)
			texts = append(texts, e.Confidence.Reason)
			for _, c := range e.Components {
				if c.Source == "" {
					t.Errorf("%s, %s: component %s has no source", name, what, c.Name)
				}
				texts = append(texts, c.Source)
			}
			for _, s := range texts {
				if m := unknownWords.FindString(s); m != "" {
					t.Errorf("%s, %s: %q says %q, which a user cannot look up", name, what, s, m)
				}
				for _, a := range docAnchor.FindAllStringSubmatch(s, -1) {
					if !anchors[a[1]] {
						t.Errorf("%s, %s: %q points to docs/memory-model.md#%s, which has no such heading", name, what, s, a[1])
					}
				}
			}
		}
	}
}

// "reference" is another name for the reference estimator; seed000 stays
// accepted for scripts that use it.
func TestReferenceAlias(t *testing.T) {
	for _, n := range []string{"reference", "seed000"} {
		e, err := ByName(n)
		if err != nil {
			t.Fatalf("ByName(%q): %v", n, err)
		}
		if e.Name() != "seed000" {
			t.Errorf("ByName(%q).Name() = %q, want seed000", n, e.Name())
		}
	}
}
