package evidence

import (
	"math"
	"slices"
	"testing"

	"github.com/canifinetune/canifinetune/estimate"
)

// oracleExactTypes are the model types whose layer the default estimator
// spells out tensor by tensor (estimate's hfExactTypes and hfMoETypes).
var oracleExactTypes = []string{"llama", "mistral", "qwen2", "gemma", "qwen3", "gemma2", "phi3", "granite", "olmo2", "stablelm", "gpt_neox", "phi", "falcon", "gpt_bigcode", "gpt2", "gemma3_text", "mixtral", "qwen2_moe", "qwen3_moe", "granitemoe", "deepseek_v2", "olmoe", "deepseek_v3", "gpt_oss"}

// The default estimator held to the fake-tensor oracle: on the simulated
// rows of the spelled-out model types, the allocated-level error per model
// type has median ≤ 1 %, p90 ≤ 3 % and worst ≤ 6 %, on the grid
// (oracle.jsonl) and on the study set (oracle-study.jsonl: the probes the
// terms were read against, chosen to find what the grid misses) each. Rows
// of other types (fitted shape) are scored by validate, not here.
func TestOracleGridHeld(t *testing.T) {
	for _, file := range []string{"oracle.jsonl", "oracle-study.jsonl"} {
		t.Run(file, func(t *testing.T) { checkOracleErrors(t, file, nil, 1, 3, 6) })
	}
}

// The same targets on the grid's QLoRA rows alone, per model type (15 dense
// types, 12 bf16-true rows each; under autocast, 6 with SDPA for the 13 SDPA
// ones but Falcon and 6 with eager attention for the 14 but Falcon): their terms (bitsandbytes' storage, the Linear4bit working
// set, the fp32 residual stream, autocast's casts) are QLoRA's own, and
// the grid's other rows would hide a miss among them.
func TestOracleGridQLoRAHeld(t *testing.T) {
	checkOracleErrors(t, "oracle.jsonl", func(c Case) bool { return c.Method == "qlora" }, 1, 3, 6)
}

// absErrorStats are the median, p90 and worst of the absolute values of
// errs (percent).
func absErrorStats(errs []float64) (med, p90, worst float64) {
	abs := make([]float64, len(errs))
	for i, v := range errs {
		abs[i] = math.Abs(v)
	}
	slices.Sort(abs)
	return abs[len(abs)/2], abs[int(math.Ceil(0.9*float64(len(abs))))-1], abs[len(abs)-1]
}

func checkOracleErrors(t *testing.T, name string, keep func(Case) bool, wantMed, wantP90, wantWorst float64) {
	cases := readCasesFile(t, name)
	def, _ := estimate.ByName("")
	errs := map[string][]float64{}
	for _, c := range cases {
		if !c.Simulated || c.Arch == nil || !slices.Contains(oracleExactTypes, *c.Arch) || c.Measured.GiB == nil {
			continue
		}
		if keep != nil && !keep(c) {
			continue
		}
		p := Predict(def, c)
		if p.Estimate == nil {
			t.Errorf("%s: unsupported: %s", c.ID, p.Unsupported)
			continue
		}
		got := float64(p.Predicted(c.Measured.Kind)) / estimate.GiB
		errs[*c.Arch] = append(errs[*c.Arch], 100*(got-*c.Measured.GiB) / *c.Measured.GiB)
	}
	if len(errs) == 0 {
		t.Fatal("no simulated rows of the spelled-out model types")
	}
	for arch, e := range errs {
		med, p90, worst := absErrorStats(e)
		t.Logf("%s: %d rows, median |err| %.2f %%, p90 %.2f %%, worst %.2f %%", arch, len(e), med, p90, worst)
		if med > wantMed || p90 > wantP90 || worst > wantWorst {
			t.Errorf("%s: oracle error median %.2f %%, p90 %.2f %%, worst %.2f %%; want ≤ %g, %g, %g", arch, med, p90, worst, wantMed, wantP90, wantWorst)
		}
	}
}

// litgptExactTypes are the model types whose LitGPT block the default
// estimator spells out (estimate/litgptsaved.go); the LitGPT oracle's rows
// of other types keep the fitted shape and are scored by validate, not here.
var litgptExactTypes = []string{"llama", "mistral", "gemma", "gemma2", "phi", "phi3", "gpt_neox", "falcon"}

// The LitGPT stack's oracle rows (oracle-litgpt.jsonl: the LitGPT
// development rows' configurations and probes of other shapes, from
// oracle/testdata/litgpt-study.json) of the spelled-out model types that
// the estimate takes on LitGPT's own code path (LoRA, QLoRA and full): per
// model type, median ≤ 1 %, p90 ≤ 3 %, worst ≤ 6 %.
func TestOracleLitGPTHeld(t *testing.T) {
	cases := readCasesFile(t, "oracle-litgpt.jsonl")
	def, _ := estimate.ByName("")
	errs, fitted := map[string][]float64{}, map[string]int{}
	for _, c := range cases {
		if !c.Simulated || c.Framework != "litgpt" || c.Measured.GiB == nil {
			continue
		}
		p := Predict(def, c)
		if p.Estimate == nil {
			continue // a model type outside the catalog's reach: validate lists it
		}
		typ := p.Request.Model.ModelType
		if !slices.Contains(litgptExactTypes, typ) {
			continue
		}
		if !estimate.LitGPTExact(p.Request) {
			// A configuration of these types off the spelled-out path
			// (Mistral 7B v0.1's sliding window, say): validate scores it.
			if c.Model == "tiiuae/falcon-40b" {
				t.Errorf("%s: Falcon-40B's new decoder layout is spelled out, but the request is off the exact path", c.ID)
			}
			fitted[typ]++
			continue
		}
		got := float64(p.Predicted(c.Measured.Kind)) / estimate.GiB
		errs[typ] = append(errs[typ], 100*(got-*c.Measured.GiB) / *c.Measured.GiB)
	}
	for _, typ := range litgptExactTypes {
		e := errs[typ]
		if len(e) < 3 {
			t.Errorf("%s: %d LitGPT oracle rows, want at least 3", typ, len(e))
			continue
		}
		med, p90, worst := absErrorStats(e)
		t.Logf("%s: %d rows on the exact path (%d off it), median |err| %.2f %%, p90 %.2f %%, worst %.2f %%", typ, len(e), fitted[typ], med, p90, worst)
		if med > 1 || p90 > 3 || worst > 6 {
			t.Errorf("%s: LitGPT oracle error median %.2f %%, p90 %.2f %%, worst %.2f %%; want ≤ 1, 3, 6", typ, med, p90, worst)
		}
	}
}

// SDPA's math kernel (attn sdpa_math) held to the oracle, which runs
// torch's composite math kernel with 16-bit reductions allowed (torch
// before 2.5): six spelled-out families, full and LoRA, with and without
// checkpointing (oracle/testdata/study-sdpamath.json): per type median
// ≤ 2 %, worst ≤ 3.5 %. Five families are within 0.2 %; GPT-NeoX
// (Pythia-160m) is over by 1.8 … 3.0 % without checkpointing, as its eager
// census is at the same shape (LoRA, 1024 × 2: +2.0 %): not the math
// kernel's terms.
func TestOracleSDPAMathHeld(t *testing.T) {
	checkOracleErrors(t, "oracle-sdpamath.jsonl", nil, 2, 3.5, 3.5)
}

// The oracle's checkpointed QLoRA rows whose down projection carries an
// adapter (oracle-adapted-mlp.jsonl, from oracle/testdata/study-adapted-mlp.json:
// Llama-2-7B and Mistral-7B, all-linear and q/v/down, bf16-true and
// bf16-mixed; the grid's adapters are on the attention only): the MLP
// backward holds that adapter's saved input less (qloraMLPFreed). Per model
// type, median ≤ 1 %, p90 ≤ 3 %, worst ≤ 6 %.
func TestOracleAdaptedMLPHeld(t *testing.T) {
	checkOracleErrors(t, "oracle-adapted-mlp.jsonl", nil, 1, 3, 6)
}

// The oracle's flash_attention_2 rows (oracle-flash.jsonl, from
// oracle/testdata/study-flash.json: Llama-3.2-1B and Mistral-7B, full, LoRA
// and QLoRA, bf16-true and bf16-mixed, checkpointing none and full), which
// the estimate keeps on the fitted shape (docs/memory-model.md): this pins
// where it stands (Llama and Mistral: median 1.69 and 2.37 %, p90 8.67 and
// 18.27 %, worst 16.09 and 23.53 %; after the refit that kept the swift
// news dataset's statistics to Qwen's tokenizer, whose checkpointing
// coefficient fell 3.41 → 3.37 B: 1.62 and 2.48 %, 8.59 and 17.76 %, 16.28
// and 22.81 %; after the refit with torchtune-flags-001 scored at a typical
// step, which raises the gated-MLP activation coefficient 0.72 → 0.85 that
// this path's fitted shape takes — the oracle's flash runs are closer to
// the lower one: 4.43 and 6.96 %, 9.19 and 18.94 %, 23.80 and 24.07 %;
// after the refit with two whole gathered layers under parameter offload,
// checkpointing 3.29 → 3.21 B: 4.18 and 6.94 %, 9.14 and 17.63 %, 23.76
// and 24.04 %) so that it does not drift further from the oracle.
func TestOracleFlashFittedPinned(t *testing.T) {
	checkOracleErrors(t, "oracle-flash.jsonl", nil, 7.0, 19.0, 24.1)
}

// Falcon-7B's QLoRA under HF Trainer's autocast (oracle-unconverted.jsonl,
// from oracle/testdata/study-falcon-autocast.json): transformers quantizes
// none of its Linears, so the run is LoRA over fp32 frozen weights that
// autocast casts per call, which the estimate takes on the fitted LoRA
// shape. This pins where it stands (upper median 15.2 %, p90 and worst 69.8 %,
// all over: the fitted activations; the weights and the optimizer step are
// the oracle's) and holds it to never under-estimate, as the 4-bit reading
// did (−64 % before).
func TestOracleUnconvertedPinned(t *testing.T) {
	checkOracleErrors(t, "oracle-unconverted.jsonl", nil, 15.3, 69.9, 69.9)
	def, _ := estimate.ByName("")
	for _, c := range readCasesFile(t, "oracle-unconverted.jsonl") {
		p := Predict(def, c)
		if p.Estimate == nil {
			t.Fatalf("%s: unsupported: %s", c.ID, p.Unsupported)
		}
		if got := float64(p.Predicted(c.Measured.Kind)) / estimate.GiB; got < *c.Measured.GiB {
			t.Errorf("%s: estimate %.2f GiB under the oracle's %.2f GiB", c.ID, got, *c.Measured.GiB)
		}
	}
}
