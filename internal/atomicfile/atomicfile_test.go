package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.json")
	if err := Write(p, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "two" {
		t.Fatalf("read %q, %v; want two", b, err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}
	// A directory that does not exist: an error, and nothing left behind.
	if err := Write(filepath.Join(dir, "no", "such", "x"), []byte("x"), 0o644); err == nil {
		t.Error("write into a missing directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries after the writes, want 1 (no temporary files)", len(entries))
	}
}

// A symlink the user named is followed: its target is replaced and the link
// stays a link. A dangling link and a directory are refused.
func TestWriteOutputSymlink(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real.json")
	if err := os.WriteFile(real, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink("real.json", link); err != nil {
		t.Skipf("no symlinks here: %v", err)
	}
	if err := WriteOutput(link, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("%s is no longer a symlink (%v, %v)", link, fi.Mode(), err)
	}
	if b, _ := os.ReadFile(real); string(b) != "new" {
		t.Errorf("target holds %q, want new", b)
	}
	if err := CheckOutput(link); err != nil {
		t.Errorf("CheckOutput(link) = %v", err)
	}

	dangling := filepath.Join(dir, "dangling.json")
	if err := os.Symlink("missing/x.json", dangling); err != nil {
		t.Fatal(err)
	}
	for name, fn := range map[string]func(string) error{
		"WriteOutput": func(p string) error { return WriteOutput(p, []byte("x"), 0o644) },
		"CheckOutput": CheckOutput,
	} {
		if err := fn(dangling); err == nil || !strings.Contains(err.Error(), "refusing to replace the link") {
			t.Errorf("%s(dangling link) = %v, want a refusal", name, err)
		}
		if err := fn(dir); err == nil || !strings.Contains(err.Error(), "is a directory") {
			t.Errorf("%s(directory) = %v, want is a directory", name, err)
		}
	}
	if fi, err := os.Lstat(dangling); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("dangling link replaced: %v %v", fi, err)
	}
	assertEntries(t, dir, "dangling.json", "link.json", "real.json")
}

func assertEntries(t *testing.T, dir string, want ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("entries of %s = %v, want %v (no temporary files)", dir, got, want)
	}
}
