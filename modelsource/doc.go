// Package modelsource finds the model a command names and parses it: an
// existing local path (a directory holding config.json, whose *.safetensors
// headers give exact parameter counts, or a config.json file), the embedded
// catalog, or the Hugging Face Hub and its cache for org/name[@revision] — in
// that order, the way transformers resolves a name.
//
// Resolve returns a Resolved: the parsed architecture (hfconfig.Model), where
// it came from (From, Source, catalog entry, Hub revision and commit), the
// exact safetensors count when one was read and the config-derived count, and
// the notes and warnings a report should carry. Failures are *Error values
// that say whether the name itself is wrong (Usage) and what to try (Hint);
// the caller chooses exit codes and wording around them.
//
// It is an edge package: it stats and reads local files (through
// internal/localfile and hub.LocalModel) and reaches the Hub through the
// Source interface, which a caller opens lazily (Options.Open) so that a test
// injects a fake and a catalog model never touches the network. It refuses to
// guess: a bare name not in the catalog is not sent to the Hub, a revision the
// catalog cannot honour is noted, and a count past 10^15 is an error.
package modelsource
