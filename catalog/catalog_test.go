package catalog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/internal/shareddata"
	"github.com/google/go-cmp/cmp"
)

// sharedConfigs finds the shared model-config collection above the working
// directory; without it the test skips, or fails in CI (CI=true).
func sharedConfigs(t *testing.T) string {
	t.Helper()
	return shareddata.Dir(t, "models", "configs")
}

// TestSharedConfigsCopiedVerbatim checks that every config.json of the shared
// collection is in the catalog byte for byte, under its model id, and that
// the Verbatim flag matches where it sits (_nonverbatim/ or the main tree).
func TestSharedConfigsCopiedVerbatim(t *testing.T) {
	root := sharedConfigs(t)
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "config.json" {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		rel = filepath.ToSlash(rel)
		id, nonVerbatim := strings.CutPrefix(rel, "_nonverbatim/")
		want, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		n++
		e, err := Lookup(id)
		if err != nil {
			t.Errorf("shared %s: %v", rel, err)
			return nil
		}
		if e.ID != id {
			t.Errorf("shared %s resolves to %s, want its own entry", rel, e.ID)
		}
		if !bytes.Equal(e.Config, want) {
			t.Errorf("catalog config of %s differs from shared %s/config.json", id, rel)
		}
		if e.Verbatim == nonVerbatim {
			t.Errorf("%s: Verbatim = %v, but the shared copy is in %s", id, e.Verbatim, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 40 {
		t.Errorf("found only %d shared configs under %s; expected the whole collection", n, root)
	}
}

// TestIndexMatchesFiles checks that every index entry has a config and every
// embedded config has an index entry.
func TestIndexMatchesFiles(t *testing.T) {
	ids := make(map[string]bool)
	for _, e := range All() {
		ids[e.ID] = true
	}
	err := fs.WalkDir(files, "models", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "config.json" {
			return err
		}
		id := strings.TrimSuffix(strings.TrimPrefix(p, "models/"), "/config.json")
		if !ids[id] {
			t.Errorf("%s has no index entry", p)
		}
		delete(ids, id)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for id := range ids {
		t.Errorf("index entry %s has no config.json", id)
	}
}

// TestEntries checks each entry's data: valid JSON with a model_type, its
// provenance filled in, and stated counts that say where they come from.
func TestEntries(t *testing.T) {
	all := All()
	if len(all) < 120 {
		t.Errorf("catalog has %d entries, want the full list (≥ 120)", len(all))
	}
	for i, e := range all {
		if i > 0 && all[i-1].ID >= e.ID {
			t.Errorf("All not sorted by ID: %s before %s", all[i-1].ID, e.ID)
		}
		var cfg struct {
			ModelType  string `json:"model_type"`
			TextConfig *struct {
				ModelType string `json:"model_type"`
			} `json:"text_config"`
		}
		if err := json.Unmarshal(e.Config, &cfg); err != nil {
			t.Errorf("%s: config.json is not valid JSON: %v", e.ID, err)
			continue
		}
		if cfg.ModelType == "" && (cfg.TextConfig == nil || cfg.TextConfig.ModelType == "") {
			t.Errorf("%s: config.json has no model_type", e.ID)
		}
		if e.Family == "" || e.Source == "" {
			t.Errorf("%s: family %q, source %q: both are required", e.ID, e.Family, e.Source)
		}
		if (e.StatedParams != 0) != (e.StatedParamsSource != "") {
			t.Errorf("%s: stated params %d with source %q: need both or neither", e.ID, e.StatedParams, e.StatedParamsSource)
		}
		if e.StatedParamsExact && e.StatedParams == 0 {
			t.Errorf("%s: StatedParamsExact without a count", e.ID)
		}
		// A rounded count must say how rounded, or a 0.5 % check cannot
		// tell a rounding gap from a wrong shape.
		if rounded := e.StatedParams != 0 && !e.StatedParamsExact; rounded != (e.StatedParamsDigits > 0) {
			t.Errorf("%s: stated %d, exact %v, digits %d: a rounded count needs its digits, an exact one none",
				e.ID, e.StatedParams, e.StatedParamsExact, e.StatedParamsDigits)
		}
		if !strings.Contains(e.ID, "/") {
			t.Errorf("%s: id has no org", e.ID)
		}
	}
}

// TestNamesUnique checks that no id or alias names two entries (the index
// load would fail too, but this names the culprit) and that no entry lists
// its own id as an alias.
func TestNamesUnique(t *testing.T) {
	seen := make(map[string]string)
	for _, e := range All() {
		for _, n := range append([]string{e.ID}, e.Aliases...) {
			k := strings.ToLower(n)
			if prev, ok := seen[k]; ok {
				t.Errorf("%q names both %s and %s", n, prev, e.ID)
			}
			seen[k] = e.ID
		}
	}
}

// TestDevModelsResolve checks that every model of the measurement set
// (testdata/dev_models.txt, the model field of shared/measurements/dev.jsonl)
// is in the catalog.
func TestDevModelsResolve(t *testing.T) {
	f, err := os.Open("testdata/dev_models.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		n++
		if _, err := Lookup(line); err != nil {
			t.Errorf("dev model %s: %v", line, err)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 30 {
		t.Errorf("read %d dev model ids, want the whole list", n)
	}
}

// TestRequiredModels checks the families and sizes the catalog promises.
func TestRequiredModels(t *testing.T) {
	for _, id := range requiredModels {
		if _, err := Lookup(id); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
}

var requiredModels = []string{
	"HuggingFaceTB/SmolLM3-3B", "distilbert/distilbert-base-uncased",
	"Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-1.5B", "Qwen/Qwen2.5-3B", "Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-14B", "Qwen/Qwen2.5-32B", "Qwen/Qwen2.5-72B",
	"Qwen/Qwen2-7B",
	"Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-4B", "Qwen/Qwen3-8B", "Qwen/Qwen3-14B", "Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B",
	"meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-13b-hf", "meta-llama/Llama-2-70b-hf",
	"meta-llama/Meta-Llama-3-8B", "meta-llama/Meta-Llama-3-70B",
	"meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-405B",
	"meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.2-3B", "meta-llama/Llama-3.3-70B-Instruct",
	"mistralai/Mistral-7B-v0.1", "mistral-community/Mistral-7B-v0.2", "mistralai/Mistral-7B-v0.3",
	"mistralai/Mixtral-8x7B-v0.1", "mistralai/Mistral-Nemo-Base-2407", "mistralai/Mistral-Small-24B-Base-2501",
	"google/gemma-2b", "google/gemma-7b",
	"google/gemma-2-2b", "google/gemma-2-9b", "google/gemma-2-27b",
	"google/gemma-3-1b-pt", "google/gemma-3-4b-pt", "google/gemma-3-12b-pt", "google/gemma-3-27b-pt",
	"microsoft/phi-1_5", "microsoft/phi-2", "microsoft/Phi-3-mini-4k-instruct", "microsoft/Phi-3.5-mini-instruct", "microsoft/phi-4",
	"tiiuae/falcon-7b", "tiiuae/falcon-40b",
	"stabilityai/stablelm-base-alpha-3b", "stabilityai/stablelm-3b-4e1t",
	"TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T",
	"01-ai/Yi-34B",
	"bigcode/gpt_bigcode-santacoder",
	"ibm/PowerLM-3b",
	"ibm-granite/granite-3.0-2b-base", "ibm-granite/granite-3.0-8b-base",
	"deepseek-ai/DeepSeek-V2-Lite", "deepseek-ai/DeepSeek-V3",
	"allenai/OLMo-2-1124-7B",
	"HuggingFaceTB/SmolLM2-135M", "HuggingFaceTB/SmolLM2-360M", "HuggingFaceTB/SmolLM2-1.7B",
	"openai-community/gpt2", "openai-community/gpt2-medium", "openai-community/gpt2-large", "openai-community/gpt2-xl",
	"EleutherAI/pythia-1b",
	"google/flan-t5-large", "facebook/bart-large",
	// Models people fine-tune today, as entries or as aliases of an entry
	// with the same shapes (SOURCES.md says which, and why).
	"Qwen/Qwen2-0.5B", "Qwen/Qwen2-1.5B", "Qwen/Qwen2-72B",
	"Qwen/Qwen2.5-Coder-1.5B-Instruct", "Qwen/Qwen2.5-Coder-7B-Instruct", "Qwen/Qwen2.5-Coder-14B-Instruct", "Qwen/Qwen2.5-Coder-32B-Instruct",
	"deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
	"deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "deepseek-ai/DeepSeek-R1-Distill-Llama-70B",
	"HuggingFaceH4/zephyr-7b-beta", "codellama/CodeLlama-7b-hf",
	"microsoft/Phi-3-mini-128k-instruct", "microsoft/Phi-3-medium-4k-instruct", "microsoft/Phi-4-mini-instruct",
	"google/gemma-3-270m", "01-ai/Yi-1.5-6B", "01-ai/Yi-1.5-34B",
	"allenai/OLMo-2-0425-1B", "allenai/OLMo-2-1124-13B",
	"EleutherAI/pythia-160m", "EleutherAI/pythia-410m", "EleutherAI/pythia-1.4b", "EleutherAI/pythia-2.8b", "EleutherAI/pythia-6.9b", "EleutherAI/pythia-12b",
	"bigscience/bloomz-560m", "bigscience/bloomz-1b7", "bigscience/bloomz-3b", "bigscience/bloomz-7b1", "bigscience/bloom-7b1",
	"bigscience/mt0-base", "bigscience/mt0-large", "bigscience/mt0-xl", "bigscience/mt0-xxl",
	"google/flan-t5-small", "google/flan-t5-base", "google-t5/t5-base", "google-t5/t5-large", "google/mt5-small", "google/mt5-base",
	"facebook/bart-base", "FacebookAI/roberta-base", "FacebookAI/roberta-large", "google-bert/bert-base-uncased",
	"microsoft/deberta-v3-base", "microsoft/deberta-v3-large", "answerdotai/ModernBERT-base",
	"facebook/opt-125m", "facebook/opt-350m", "facebook/opt-1.3b", "facebook/opt-2.7b", "facebook/opt-6.7b", "facebook/opt-13b", "facebook/opt-30b",
	"EleutherAI/gpt-j-6b", "Qwen/Qwen1.5-0.5B", "Qwen/Qwen1.5-0.5B-Chat", "Qwen/Qwen1.5-7B", "Qwen/Qwen1.5-7B-Chat",
	"huggyllama/llama-7b", "huggyllama/llama-13b", "huggyllama/llama-30b", "huggyllama/llama-65b",
	"openlm-research/open_llama_3b", "openlm-research/open_llama_7b", "openlm-research/open_llama_13b", "openlm-research/open_llama_7b_v2",
	"lmsys/vicuna-7b-v1.5", "lmsys/vicuna-13b-v1.5", "codellama/CodeLlama-13b-hf", "codellama/CodeLlama-34b-hf",
	"deepseek-ai/deepseek-llm-7b-base", "Qwen/QwQ-32B", "Qwen/Qwen3-235B-A22B", "Qwen/Qwen3-30B-A3B-Instruct-2507", "Qwen/Qwen3-4B-Instruct-2507",
	"mistralai/Mixtral-8x22B-v0.1", "EleutherAI/gpt-neox-20b", "THUDM/glm-4-9b", "stabilityai/stablelm-2-zephyr-1_6b",
}

func TestLookup(t *testing.T) {
	tests := []struct {
		name   string
		wantID string
	}{
		{"Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-7B"},
		{"qwen/qwen2.5-7b", "Qwen/Qwen2.5-7B"},
		{"QWEN/QWEN2.5-7B-INSTRUCT", "Qwen/Qwen2.5-7B"},
		{"Qwen/Qwen2.5-7B@main", "Qwen/Qwen2.5-7B"},
		{"Qwen/Qwen2.5-7B/", "Qwen/Qwen2.5-7B"},
		{" Qwen/Qwen2.5-7B-Instruct@0123abcd/ ", "Qwen/Qwen2.5-7B"},
		{"meta-llama/Llama-2-7b-chat-hf", "meta-llama/Llama-2-7b-hf"},
		{"NousResearch/Llama-2-13b-hf", "meta-llama/Llama-2-13b-hf"},
		{"meta-llama/Meta-Llama-3.1-8B", "meta-llama/Llama-3.1-8B"},
		{"meta-llama/Llama-3.2-3B-Instruct", "meta-llama/Llama-3.2-3B"},
		{"unsloth/Mistral-7B-v0.2", "mistral-community/Mistral-7B-v0.2"},
		{"gpt2", "openai-community/gpt2"},
		{"google/gemma-2-9b-it", "google/gemma-2-9b"},
		{"Qwen/Qwen2.5-Coder-7B-Instruct", "Qwen/Qwen2.5-7B"},
		{"deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "meta-llama/Llama-3.1-8B"},
		{"EleutherAI/pythia-410m-deduped", "EleutherAI/pythia-410m"},
		{"bigscience/bloomz-7b1", "bigscience/bloom-7b1"},
		{"google/gemma-3-270m", "google/gemma-3-270m-it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := Lookup(tt.name)
			if err != nil {
				t.Fatalf("Lookup(%q): %v", tt.name, err)
			}
			if diff := cmp.Diff(tt.wantID, e.ID); diff != "" {
				t.Errorf("Lookup(%q) ID (-want +got):\n%s", tt.name, diff)
			}
			if len(e.Config) == 0 {
				t.Errorf("Lookup(%q): empty config", tt.name)
			}
		})
	}
}

func TestLookupNotFound(t *testing.T) {
	tests := []struct {
		name    string
		suggest []string // ids the message must name
	}{
		{"Qwen/Qwen2.5-8B", []string{"Qwen/Qwen2.5-7B"}},
		{"meta-llama/Llama-2-7b", nil}, // alias: found, see below
		{"mistralai/Mistral-7B-v0.4", []string{"mistralai/Mistral-7B-v0.3"}},
		{"Qwen2.5-72B", []string{"Qwen/Qwen2.5-72B"}},
		{"phi-3.5", []string{"microsoft/Phi-3.5-mini-instruct"}},
		{"no-such-org/zzzzzzzzzzzzzzzzzzzz", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Lookup(tt.name)
			if tt.name == "meta-llama/Llama-2-7b" {
				if err != nil {
					t.Fatalf("alias %s: %v", tt.name, err)
				}
				return
			}
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("Lookup(%q) error = %v, want ErrNotFound", tt.name, err)
			}
			for _, s := range tt.suggest {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Lookup(%q) error %q does not suggest %s", tt.name, err, s)
				}
			}
			if tt.suggest == nil && strings.Contains(err.Error(), "closest") {
				t.Errorf("Lookup(%q) error %q suggests something for a name close to nothing", tt.name, err)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-7B"},
		{"Qwen/Qwen2.5-7B@v1.0", "Qwen/Qwen2.5-7B"},
		{"Qwen/Qwen2.5-7B//", "Qwen/Qwen2.5-7B"},
		{"  gpt2  ", "gpt2"},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, Normalize(tt.in)); diff != "" {
			t.Errorf("Normalize(%q) (-want +got):\n%s", tt.in, diff)
		}
	}
}

// TestSourcesDocumentEveryEntry checks that models/SOURCES.md has a row for
// every entry, so no file enters the catalog without its provenance written
// down.
func TestSourcesDocumentEveryEntry(t *testing.T) {
	doc, err := os.ReadFile("models/SOURCES.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range All() {
		if !bytes.Contains(doc, []byte("| `"+e.ID+"` |")) {
			t.Errorf("models/SOURCES.md has no row for %s", e.ID)
		}
	}
}

// FuzzLookup feeds Lookup arbitrary names, as users type them: it must never
// panic, and must either find an entry the name (normalised) names, or say
// ErrNotFound.
func FuzzLookup(f *testing.F) {
	for _, s := range []string{"Qwen/Qwen2.5-7B", "gpt2@main/", "", "@", "/", "qwen/QWEN3-8B-base", "Qwen2.5-72", "ünïcödé/模型"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		e, err := Lookup(name)
		if err != nil {
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("Lookup(%q) error %v does not wrap ErrNotFound", name, err)
			}
			return
		}
		n := strings.ToLower(Normalize(name))
		if strings.ToLower(e.ID) != n && !slices.ContainsFunc(e.Aliases, func(a string) bool { return strings.ToLower(a) == n }) {
			t.Fatalf("Lookup(%q) = %s, which neither it nor an alias names", name, e.ID)
		}
	})
}

// BenchmarkLookup measures a hit and a miss (the miss ranks every name for
// suggestions, so it is the slow path).
func BenchmarkLookup(b *testing.B) {
	b.Run("hit", func(b *testing.B) {
		for b.Loop() {
			if _, err := Lookup("qwen/qwen2.5-7b-instruct@main"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("miss", func(b *testing.B) {
		for b.Loop() {
			if _, err := Lookup("Qwen/Qwen2.5-8B"); err == nil {
				b.Fatal("found a model that is not in the catalog")
			}
		}
	})
}

// An Unsloth 4-bit upload resolves to the entry of the model it packs, and
// says so; only Unsloth's own -bnb-4bit names do.
func TestLookupUnslothPacked(t *testing.T) {
	for _, c := range []struct{ name, wantID string }{
		{"unsloth/llama-3-8b-bnb-4bit", "meta-llama/Meta-Llama-3-8B"},
		{"unsloth/Meta-Llama-3.1-8B-bnb-4bit", "meta-llama/Llama-3.1-8B"},
		{"UNSLOTH/Qwen2.5-7B-Instruct-unsloth-bnb-4bit", "Qwen/Qwen2.5-7B"},
	} {
		e, err := Lookup(c.name)
		if err != nil || e.ID != c.wantID || e.PreQuantized != Normalize(c.name) {
			t.Errorf("Lookup(%q) = %q (pre-quantized %q), %v; want %s, pre-quantized", c.name, e.ID, e.PreQuantized, err, c.wantID)
		}
	}
	if e, err := Lookup("unsloth/llama-3-8b"); err != nil || e.PreQuantized != "" {
		t.Errorf("the unquantized upload: pre-quantized %q, %v", e.PreQuantized, err)
	}
	for _, name := range []string{"someone/llama-3-8b-bnb-4bit", "unsloth/-bnb-4bit", "unsloth/no-such-model-bnb-4bit"} {
		if _, err := Lookup(name); !errors.Is(err, ErrNotFound) {
			t.Errorf("Lookup(%q): %v, want ErrNotFound", name, err)
		}
	}
}
