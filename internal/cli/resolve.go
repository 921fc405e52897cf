package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/canifinetune/canifinetune/hfconfig"
	"github.com/canifinetune/canifinetune/internal/hub"
	"github.com/canifinetune/canifinetune/modelsource"
)

// ModelFlags are the flags of every command that takes a model: where the
// model may come from. Commands embed them so the flags read the same
// everywhere.
type ModelFlags struct {
	Revision string `help:"Hub branch, tag or commit of the model (or write the id as org/name@revision)."`
	Offline  bool   `help:"Use only the embedded catalog and the Hugging Face cache; never the network (also HF_HUB_OFFLINE=1)."`
	Hub      bool   `help:"Read config.json and safetensors headers from the Hub (or its cache) even for a catalog model, for exact parameter counts."`
	Vocab    int64  `name:"vocab-size" placeholder:"N" help:"Vocabulary size, for a config.json without vocab_size (or to override it)."`
}

// hubOptions is what a command decides about Hub access; the source reads
// everything else (HF_ENDPOINT, HF_TOKEN, HF_HOME, HF_HUB_OFFLINE) itself.
type hubOptions struct {
	// Offline forbids the network, from --offline.
	Offline bool
	// Progress receives per-shard progress lines; nil for none.
	Progress io.Writer
}

// newHubClient is the real modelsource.Source: a hub.Client configured from the
// environment the way huggingface_hub is, with the command's choices on top.
func newHubClient(getenv func(string) string, o hubOptions) (modelsource.Source, error) {
	c, err := hub.NewFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	c.Offline = c.Offline || o.Offline
	c.Progress = o.Progress
	return c, nil
}

// hubSource returns the Env's model source, or the real Hub client when the
// Env names none (an Env built by hand, as the README test does).
func (env *Env) hubSource(o hubOptions) (modelsource.Source, error) {
	if env.Hub != nil {
		return env.Hub(o)
	}
	getenv := env.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	return newHubClient(getenv, o)
}

// envOffline reads HF_HUB_OFFLINE as huggingface_hub does.
func envOffline(getenv func(string) string) bool {
	if getenv == nil {
		return false
	}
	switch strings.ToUpper(strings.TrimSpace(getenv("HF_HUB_OFFLINE"))) {
	case "1", "ON", "YES", "TRUE":
		return true
	}
	return false
}

// maxVocab bounds --vocab-size: far above any tokenizer (Gemma's 262,144),
// low enough that tokens × vocabulary × bytes cannot wrap.
const maxVocab = 1 << 24

// resolveModel finds the model named on the command line through
// modelsource.Resolve, with the Hub opened from env only when the model must
// come from it, and renders what the library returns: warnings to stderr,
// failures as exit codes with a "Try:" hint.
func resolveModel(ctx context.Context, env *Env, name string, f ModelFlags) (*modelsource.Resolved, error) {
	progress := io.Writer(nil)
	if env.ErrIsTerminal {
		progress = env.Stderr
	}
	if f.Vocab < 0 || f.Vocab > maxVocab {
		return nil, withHint(ExitUsage, fmt.Errorf("--vocab-size %d: want a vocabulary size from 1 to %d", f.Vocab, maxVocab), "--vocab-size 49152")
	}
	rm, err := modelsource.Resolve(ctx, name, modelsource.Options{
		Revision: f.Revision, Hub: f.Hub, Offline: f.Offline || envOffline(env.Getenv), Vocab: f.Vocab,
		Open: func() (modelsource.Source, error) {
			return env.hubSource(hubOptions{Offline: f.Offline, Progress: progress})
		},
	})
	if rm != nil {
		for _, w := range rm.Warnings {
			fmt.Fprintf(env.Stderr, "canifinetune: warning: %s\n", w)
		}
	}
	if errors.Is(err, hfconfig.ErrNoVocab) {
		return nil, withHint(ExitUsage, err, "--vocab-size N (the tokenizer's vocabulary size, as the model's embedding matrix has it)")
	}
	var re *modelsource.Error
	if errors.As(err, &re) {
		code := ExitError
		if re.Usage {
			code = ExitUsage
		}
		return nil, withHint(code, re.Err, re.Hint)
	}
	return rm, err
}

// withHint wraps err with an exit code and a "Try:" hint.
func withHint(code int, err error, hint string) error {
	return &exitError{code: code, err: err, hint: hint}
}
