package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/canifinetune/canifinetune/catalog"
	"github.com/canifinetune/canifinetune/hfconfig"
)

// resolvedModel is a model named on the command line, parsed.
type resolvedModel struct {
	Name  string // what the user typed
	ID    string // the catalog id, Hub id, or the local path
	Where string // "catalog", "local", "hub", "hub cache"
	// Entry is the catalog entry used ("" when not from the catalog).
	Entry  string
	Source string
	Model  *hfconfig.Model
	// ExactParams is the count from safetensors headers; 0 when not read.
	ExactParams int64
	Notes       []string
}

// resolveModel finds a model by local path (a directory holding config.json,
// or a config.json file) or by Hub id in the embedded catalog.
func resolveModel(env *Env, name string) (*resolvedModel, error) {
	if name == "" {
		return nil, usageErrorf("canifinetune models", "no model given")
	}
	if looksLikePath(name) {
		return resolveLocal(name)
	}
	e, err := catalog.Lookup(name)
	if err != nil {
		if errors.Is(err, catalog.ErrNotFound) {
			return nil, withHint(ExitUsage, err, "canifinetune models  (the catalog), or pass a local directory holding config.json")
		}
		return nil, err
	}
	m, err := hfconfig.Parse(e.Config)
	if err != nil {
		return nil, fmt.Errorf("catalog entry %s: %w", e.ID, err)
	}
	return &resolvedModel{Name: name, ID: e.ID, Where: "catalog", Entry: e.ID, Source: e.Source, Model: m}, nil
}

// looksLikePath follows transformers: an existing local path wins over a Hub
// id of the same spelling; an explicit path that does not exist is an error,
// not a Hub lookup.
func looksLikePath(name string) bool {
	if _, err := os.Stat(name); err == nil {
		return true
	}
	return strings.HasPrefix(name, ".") || strings.HasPrefix(name, "/") || strings.HasPrefix(name, "~") || strings.HasSuffix(name, ".json")
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func resolveLocal(name string) (*resolvedModel, error) {
	path := name
	if isDir(path) {
		path = filepath.Join(path, "config.json")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, withHint(ExitUsage, fmt.Errorf("model %s: no such file %s", name, path), "pass a directory holding config.json, a config.json file, or a Hub id such as Qwen/Qwen2.5-7B")
		}
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	m, err := hfconfig.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &resolvedModel{Name: name, ID: name, Where: "local", Source: path, Model: m}, nil
}

// withHint wraps err with an exit code and a "Try:" hint.
func withHint(code int, err error, hint string) error {
	return &exitError{code: code, err: err, hint: hint}
}
