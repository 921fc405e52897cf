package estimate

import "fmt"

// Task is the head a run trains through, which decides the loss's inputs:
// a causal LM's logits over the vocabulary at every position, a masked LM's
// the same (BertForMaskedLM scores every position; the labels mask the
// loss, not the logits), a sequence classifier's one row of labels per
// sequence.
type Task string

// Tasks.
const (
	TaskCausalLM       Task = "causal-lm"
	TaskMaskedLM       Task = "masked-lm"
	TaskClassification Task = "sequence-classification"
)

// TaskSpec is what a task's head computes.
type TaskSpec struct {
	Name    Task
	Help    string
	Aliases []string
	// VocabLogits: the head scores the vocabulary at every position.
	VocabLogits bool
	// Encoder and Decoder: the model kinds the head exists for.
	Encoder, Decoder bool
}

func (s TaskSpec) choice() Choice {
	return Choice{Name: string(s.Name), Help: s.Help, Aliases: s.Aliases}
}

// Tasks is the table of task heads.
var Tasks = []TaskSpec{
	{Name: TaskCausalLM, Help: "next-token prediction: vocabulary logits at every position (decoders)", VocabLogits: true, Decoder: true},
	{Name: TaskMaskedLM, Help: "masked-LM: vocabulary logits at every position (encoders)", Aliases: []string{"mlm"}, VocabLogits: true, Encoder: true},
	{Name: TaskClassification, Help: "sequence classification: a few logits per sequence (the default for encoders)", Aliases: []string{"classification"}, Encoder: true, Decoder: true},
}

// ParseTask reads a task head's name.
func ParseTask(s string) (Task, error) { return parseIn[Task]("task", s, Tasks) }

// Spec is the task's row of Tasks.
func (t Task) Spec() TaskSpec { return lookup(Tasks, t) }

// checkTask fills the model kind's default task and refuses a head the
// model kind has not.
func checkTask(r *Request) error {
	if r.Task == "" {
		r.Task = TaskCausalLM
		if r.Model.Encoder {
			// What encoders are fine-tuned for most (the GLUE-style
			// recipes); a masked-LM run says so.
			r.Task = TaskClassification
		}
	}
	if err := canonical(&r.Task, ParseTask); err != nil {
		return err
	}
	s := r.Task.Spec()
	switch {
	case r.Model.Encoder && !s.Encoder:
		return fieldErr("task", r.Task, "a head an encoder-only model has (masked-lm or sequence-classification)")
	case !r.Model.Encoder && !s.Decoder:
		return fieldErr("task", r.Task, "a head a decoder has (causal-lm or sequence-classification)")
	}
	return nil
}

func taskAssumption(r Request) string {
	if r.Task == TaskCausalLM {
		return ""
	}
	return fmt.Sprintf("task %s: %s", r.Task, r.Task.Spec().Help)
}
