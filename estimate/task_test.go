package estimate

import (
	"errors"
	"testing"
)

// An encoder's loss follows its head: a classifier's logits are a few per
// sequence, a masked LM scores the vocabulary at every position like a
// causal LM; a head the model kind lacks is refused by field.
func TestEncoderTasks(t *testing.T) {
	m := catalogModel(t, "google-bert/bert-large-uncased")
	base := Request{Model: m, Method: Full, Precision: FP32, SeqLen: 512, Batch: 4, Attn: Eager, Stack: StackHFTrainer}
	cls := est(t, base)
	mlm := base
	mlm.Task = TaskMaskedLM
	tm, _, err := PhasePeak{Coef: DefaultCoefficients}.terms(mlm)
	if err != nil {
		t.Fatal(err)
	}
	if want := float64(512 * 4 * m.Vocab); tm.LogitUnit != want {
		t.Errorf("masked-LM logit elements %.0f, want s·b·V = %.0f", tm.LogitUnit, want)
	}
	tc, r, err := PhasePeak{Coef: DefaultCoefficients}.terms(base)
	if err != nil {
		t.Fatal(err)
	}
	if r.Task != TaskClassification || tc.LogitUnit != 0 {
		t.Errorf("encoder default: task %s, logit elements %.0f; want sequence-classification and none", r.Task, tc.LogitUnit)
	}
	if got := est(t, mlm).Levels.Allocated - cls.Levels.Allocated; got <= 0 {
		t.Errorf("masked-LM estimates %d B more than classification, want more", got)
	}
	for _, c := range []struct {
		model string
		task  Task
	}{{"google-bert/bert-large-uncased", TaskCausalLM}, {"meta-llama/Llama-2-7b-hf", TaskMaskedLM}} {
		r := base
		r.Model = catalogModel(t, c.model)
		r.Task = c.task
		var fe *FieldError
		if _, err := r.Normalize(); !errors.As(err, &fe) || fe.Field != "task" {
			t.Errorf("%s with %s: want a field error on task, got %v", c.model, c.task, err)
		}
	}
}
