package cli

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDeviceCheckCommandsParse runs every bench command that
// scripts/device-check.sh would run (from its --dry-run) through Main with a
// fake Python, so the script cannot drift from the CLI's flags or name a
// config that is not carried.
func TestDeviceCheckCommandsParse(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	cmd := exec.Command(bash, "scripts/device-check.sh", "--dry-run")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(cmd.Environ(), "OUT="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("device-check.sh --dry-run: %v\n%s", err, out)
	}
	fake, err := filepath.Abs(filepath.Join("..", "..", "bench", "testdata", "fakepy", "success"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		rest, ok := strings.CutPrefix(line, "+ scripts/bin/canifinetune ")
		if !ok {
			continue
		}
		n++
		args := strings.Fields(rest)
		for i, a := range args {
			switch {
			case a == "--python":
				args[i+1] = fake
			case a == "--receipt":
				args[i+1] = filepath.Join(t.TempDir(), "r.json")
			case i == 1: // the config directory, relative to the repository root
				args[i] = filepath.Join("..", "..", a)
			}
		}
		var stdout, stderr bytes.Buffer
		code := Main(args, Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
		if code != ExitOK || !strings.Contains(stdout.String(), "bench: success") {
			t.Errorf("%s\nexit %d\nstdout: %s\nstderr: %s", line, code, stdout.String(), stderr.String())
		}
	}
	if n < 10 {
		t.Errorf("device-check.sh --dry-run listed %d bench commands, want at least 10:\n%s", n, out)
	}
}

// TestDeviceConfigsAreTheCatalogs: every config.json the device check
// carries is byte for byte the catalog's copy of that model (whose
// provenance catalog/models/SOURCES.md gives), and SOURCES.md beside them
// lists each with its sha256.
func TestDeviceConfigsAreTheCatalogs(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "scripts", "device-configs", "SOURCES.md"))
	if err != nil {
		t.Fatal(err)
	}
	dirs, _ := filepath.Glob(filepath.Join(root, "scripts", "device-configs", "*", "config.json"))
	if len(dirs) < 5 {
		t.Fatalf("%d device configs, want at least 5", len(dirs))
	}
	for _, p := range dirs {
		dir := filepath.Base(filepath.Dir(p))
		var id string
		for _, line := range strings.Split(string(doc), "\n") {
			if f := strings.Split(line, "|"); len(f) == 5 && strings.TrimSpace(f[1]) == dir {
				id = strings.TrimSpace(f[2])
				got, _ := os.ReadFile(p)
				if sum := fmt.Sprintf("%x", sha256.Sum256(got)); sum != strings.TrimSpace(f[3]) {
					t.Errorf("%s: sha256 %s, SOURCES.md says %s", p, sum, strings.TrimSpace(f[3]))
				}
				want, err := os.ReadFile(filepath.Join(root, "catalog", "models", id, "config.json"))
				if err != nil {
					t.Errorf("%s: no catalog copy of %s: %v", p, id, err)
				} else if !bytes.Equal(got, want) {
					t.Errorf("%s differs from catalog/models/%s/config.json", p, id)
				}
			}
		}
		if id == "" {
			t.Errorf("%s: not listed in scripts/device-configs/SOURCES.md", p)
		}
	}
}
