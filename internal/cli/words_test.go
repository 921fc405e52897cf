package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// unopenable are references a reader of the repository cannot follow: the
// development-only sibling directory, internal specification numbers, section
// signs that point into such specifications, and issue numbers.
var unopenable = regexp.MustCompile(`(?i)\.\./shared|seed 0|§|issue #?[0-9]`)

// TestUserTextStandsOnItsOwn fails when the README, a document under docs/ or
// the --help of any command names something a user's clone does not have.
func TestUserTextStandsOnItsOwn(t *testing.T) {
	texts := map[string]string{}
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md", "../../ARCHITECTURE.md")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		texts[strings.TrimPrefix(f, "../../")] = string(b)
	}
	var root Root
	parser, err := kong.New(&root, kong.Name("canifinetune"), vocabularyVars())
	if err != nil {
		t.Fatal(err)
	}
	commands := [][]string{nil}
	for _, n := range parser.Model.Node.Children {
		commands = append(commands, []string{n.Name})
	}
	for _, args := range commands {
		var out, errb bytes.Buffer
		if code := Main(append(args, "--help"), Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}); code != 0 {
			t.Fatalf("%v --help exited %d: %s", args, code, errb.String())
		}
		texts[strings.Join(append([]string{"canifinetune"}, args...), " ")+" --help"] = out.String()
	}
	if len(texts) < 10 {
		t.Fatalf("only %d texts read: the docs or the commands were not found", len(texts))
	}
	for name, text := range texts {
		for i, line := range strings.Split(text, "\n") {
			if m := unopenable.FindString(line); m != "" {
				t.Errorf("%s:%d says %q: %s", name, i+1, m, strings.TrimSpace(line))
			}
		}
	}
}
