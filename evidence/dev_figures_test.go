package evidence

import (
	"testing"

	"github.com/canifinetune/canifinetune/estimate"
)

// Pinned development-cohort figures of the default estimator (trust high and
// medium, supported rows), as `canifinetune validate evidence/dev.jsonl
// --trust high,medium --compare canifinetune,seed000,unsloth` prints them. A
// change that makes them worse fails here; one that improves them should
// lower the pins in the same commit.
//
// The pins rose from 4.01 / 16.16 / 7.57 (128 rows) when eleven rows that
// were refused became scored (five torchtune rows with torch.compile,
// activation offloading and optimizer-in-backward; six BERT rows: encoder,
// sequence classification, process level), and when the reserved level under
// dynamic padding was capped by what the caching allocator can hold over the
// stated length distribution (the swift rows' median moves up, the tail
// down). Refit on the merged model: 139 rows, 4.77 / 17.83 / 8.15; with
// LitGPT's Llama and Mistral QLoRA on the exact path: 4.36 / 16.53 / 8.00;
// with LitGPT's exact path on every LoRA switch, Phi, GPT-NeoX, Gemma 2,
// Phi-3 and sliding windows, its loss chain not fitted, the longest-first
// runs, torchtune's chunked loss and fused AdamW, and the remote-code loss
// chains: 3.40 / 16.12 / 7.20; with Falcon 7B's LitGPT block too (its
// rows no longer hold act_classic down): 3.55 / 16.12 / 7.21; with
// torchtune's compiled chunks keeping their new 16-bit gradient beside the
// saved chunk (AOTAutograd donates no saved forward input; flags-010 goes
// from +2.6 to +7.9 %): 3.58 / 16.14 / 7.25; with a torchtune run's
// "AdamW8bit" read as torchao's, whose per-parameter compiled step holds
// fp32 temporaries (flags-008 from -13.4 to -2.3 %): 3.53 / 16.14 / 7.17;
// with a QLoRA MLP's intermediates in 16 bits where the stack keeps the
// norms in 16 bits (fp32 only behind PEFT's upcast norms): 3.38 / 15.95 /
// 7.12; with the torchtune tutorial rows estimated over the cleaned Alpaca
// set's measured length histogram instead of the bound alone (their LoRA
// rows from +8…+10 % to +5…+7 %, the QLoRA row, whose peak is its model
// initialisation's, from -15 to -20 %; the refit moves the allocator terms):
// 3.45 / 16.53 / 7.12; with the news dataset's Qwen-tokenizer statistics
// kept to the Qwen rows (chatglm3, Yi, Baichuan2 and openbuddy-zephyr
// count other tokens, so their reserved level is bounded over lengths
// spread evenly up to the bound, as for a case that states none): 3.35 /
// 16.19 / 6.97; with torchtune-flags-001's active figure read as one
// logged step's peak (torchtune resets the peak statistics each time it
// logs them) and scored at a typical batch of unpacked Alpaca, not at its
// 4,096-token bound (+124 → -3.3 %; the refit's gated-MLP activation
// coefficient, which that row had held down, rises 0.72 → 0.85): 3.18 /
// 15.91 / 6.00; with the Trainer's adamw_hf read as transformers' own
// AdamW, a per-parameter loop (hf-perf-005: +26.6 → +20.1 %): 3.18 / 15.91
// / 5.95; with a rank that offloads its parameters holding two whole
// gathered layers on the GPU, not two layers' share of its shard
// (fsdpqlora-013/014; the refit's checkpoint bytes 3.29 → 3.21): 3.24 /
// 15.88 / 5.96.
const (
	pinMedianAbs = 3.24
	pinP90Abs    = 15.88
	pinMAPE      = 5.96
	pinSlack     = 0.05 // rounding of the printed figures
)

func highMedium(cases []Case) []Case {
	var out []Case
	for _, c := range cases {
		if c.Trust == "high" || c.Trust == "medium" {
			out = append(out, c)
		}
	}
	return out
}

func TestDevFiguresPinned(t *testing.T) {
	cases := highMedium(readDev(t))
	def, _ := estimate.ByName("")
	rep := Score(cases, def)
	s := rep.Summary
	t.Logf("default on %d rows (%d unsupported, %d OOM): median |err| %.2f%%, p90 %.2f%%, MAPE %.2f%%, median signed %.2f%%",
		s.N, s.Unsupported, s.OOM, s.MedianAbs, s.P90Abs, s.MAPE, s.MedianSigned)
	if s.MedianAbs > pinMedianAbs+pinSlack || s.P90Abs > pinP90Abs+pinSlack || s.MAPE > pinMAPE+pinSlack {
		t.Errorf("dev figures regressed: median %.2f (pin %.1f), p90 %.2f (pin %.1f), MAPE %.2f (pin %.1f)",
			s.MedianAbs, pinMedianAbs, s.P90Abs, pinP90Abs, s.MAPE, pinMAPE)
	}
	// No OOM row may be predicted to fit, and no more successful runs than
	// today may be predicted not to (9 of 13 predicted-no rows succeeded:
	// each ran with at least 82 % of its card allocated, most above 92 %,
	// where the plan's 5 % safety margin says no; the refit after swift-017
	// and swift-036 were re-graded to low trust raised the allocator constant
	// by 0.13 GiB and moved fsdpqlora-010 and litgpt-rt-016, both within 4 %
	// of their measurement, from marginal to no; the refit with the
	// reserved level bounded by the caching-allocator model raised it
	// again, 1.37 → 1.51 GiB, and moved fsdpqlora-011, -016 and -017 —
	// 22.5–23.1 GiB reserved on 24 GiB cards, estimated within 2.2 % — from
	// marginal to no: 12 of 16; LitGPT's exact path raised litgpt-hub-013,
	// 18.41 GiB allocated on a 24 GiB A10G, from 17.78 to 18.38 GiB
	// estimated, which moved it from marginal to no: 13 of 17; the refit
	// with LitGPT's QLoRA on the exact path, whose Llama and Mistral QLoRA
	// rows no longer inform the fitted activation shape, raised
	// act_classic 0.7131 → 0.7144 and moved hf-perf-001, BERT-large at
	// 14.60 GiB of a 16 GiB V100, estimated 14.73 GiB (+0.9 %), from
	// marginal to no: 14 of 18; Gemma 2 on LitGPT's exact path moved
	// litgpt-hub-011, Gemma-2-9B QLoRA at 19.48 GiB allocated on a 24 GiB
	// card, from 17.19 to 19.52 GiB estimated (+0.2 %), from marginal to
	// no: 15 of 19; with Falcon 7B's LitGPT rows off the fitted shape,
	// act_classic, now set by three LitGPT FSDP and bf16-mixed rows, rose
	// 0.77 → 0.84 and moved hf-perf-004, BERT at 13.61 GiB (nvidia-smi) of
	// a 16 GiB card, estimated 14.98 GiB, from marginal to no: 16 of 20).
	cl := rep.Classification
	if cl.PredictedYesOOM != 0 {
		t.Errorf("%d OOM rows predicted yes", cl.PredictedYesOOM)
	}
	if cl.PredictedNoOK > 16 {
		t.Errorf("%d of %d rows predicted no succeeded (pin: 16)", cl.PredictedNoOK, cl.PredictedNo)
	}
	// Beats both references on MAPE over the same observations.
	for _, ref := range []string{"seed000", "unsloth"} {
		est, err := estimate.ByName(ref)
		if err != nil {
			t.Fatal(err)
		}
		_, same, err := SameObservations(cases, []Report{rep, Score(cases, est)})
		if err != nil {
			t.Fatal(err)
		}
		a, b := same[0].Summary, same[1].Summary
		t.Logf("same %d rows: default MAPE %.2f%%, %s MAPE %.2f%%", a.N, a.MAPE, ref, b.MAPE)
		if a.N != b.N || a.MAPE >= b.MAPE {
			t.Errorf("default MAPE %.2f%% (%d rows) does not beat %s's %.2f%% (%d rows) on the same observations", a.MAPE, a.N, ref, b.MAPE, b.N)
		}
	}
}
