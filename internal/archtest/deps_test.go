package archtest

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/canifinetune/canifinetune"

// root is the module root, two directories up from this package.
const root = "../.."

// forbidden are the imports that reach the outside world: files, processes,
// the network. The pure packages take plain values and readers instead, so
// that they can be tested, fuzzed and reused (by a web page, a planner)
// without a machine behind them.
var forbidden = []string{"os", "os/exec", "os/signal", "net", "net/http", "syscall", "io/ioutil", "plugin"}

// pure are the packages that must not reach a forbidden import, directly or
// through another package of this module. gpu is the card table and the
// readers of what nvidia-smi, rocm-smi and the stack script print; the
// programs themselves run in gpu/probe, so evidence and placement, which
// read the table, stay pure.
var pure = []string{"estimate", "allocator", "hfconfig", "trace", "internal/safetensors", "catalog", "internal/suggest", "internal/checked", "internal/bytesize",
	"gpu", "placement", "evidence", "plan"}

// imports returns the non-test imports of the package in dir, as the go
// command would build it for this platform.
func imports(t *testing.T, dir string) []string {
	t.Helper()
	p, err := build.Default.ImportDir(filepath.Join(root, dir), 0)
	if err != nil {
		t.Fatalf("read package %s: %v", dir, err)
	}
	return p.Imports
}

// reach follows dir's imports through the module's own packages and returns,
// for each forbidden import reached, the chain of packages that reaches it.
func reach(t *testing.T, dir string, follow bool) map[string][]string {
	t.Helper()
	found := map[string][]string{}
	seen := map[string]bool{}
	var walk func(dir string, chain []string)
	walk = func(dir string, chain []string) {
		if seen[dir] {
			return
		}
		seen[dir] = true
		chain = append(slices.Clone(chain), dir)
		for _, imp := range imports(t, dir) {
			if slices.Contains(forbidden, imp) {
				if _, ok := found[imp]; !ok {
					found[imp] = chain
				}
			}
			if rel, ok := strings.CutPrefix(imp, module+"/"); ok && follow {
				walk(rel, chain)
			}
		}
	}
	walk(dir, nil)
	return found
}

// TestPurePackagesDoNoIO fails when a pure package imports os, os/exec, net
// or net/http, itself or through another package of this module.
func TestPurePackagesDoNoIO(t *testing.T) {
	for _, dir := range pure {
		for imp, chain := range reach(t, dir, true) {
			t.Errorf("%s reaches %q through %s: the pure packages take values and readers, and I/O lives in internal/cli, internal/hub, modelsource, gpu/probe and bench", dir, imp, strings.Join(chain, " → "))
		}
	}
}

// The check itself: a package known to run processes is caught.
func TestReachFindsIO(t *testing.T) {
	got := reach(t, "internal/cli", true)
	for _, imp := range []string{"os", "os/exec"} {
		if _, ok := got[imp]; !ok {
			t.Errorf("reach(internal/cli) did not find %q; found %v", imp, got)
		}
	}
	// internal/cli does not import os/exec itself: it is found through
	// another package (gpu/probe, bench), so the chain is longer than one.
	if chain := got["os/exec"]; len(chain) < 2 {
		t.Errorf("reach(internal/cli) should find os/exec through another package, found chain %v", chain)
	}
	if _, ok := reach(t, "gpu/probe", false)["os/exec"]; !ok {
		t.Errorf("reach(gpu/probe) did not find os/exec: the probes run programs")
	}
}

// TestArchitectureNamesEveryPackage fails when ARCHITECTURE.md does not
// mention a package directory of the module, so a new package gets its line.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() {
			if p, err := build.Default.ImportDir(path, 0); err == nil && p.Name != "" {
				rel, _ := filepath.Rel(root, path)
				dirs = append(dirs, filepath.ToSlash(rel))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 10 {
		t.Fatalf("found only %d packages: %v", len(dirs), dirs)
	}
	for _, d := range dirs {
		if !strings.Contains(string(doc), "`"+d+"/`") {
			t.Errorf("ARCHITECTURE.md does not describe package %s (write it as `%s/`)", d, d)
		}
	}
}
