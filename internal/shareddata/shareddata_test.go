package shareddata

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// outcome records what missing asked of the test instead of ending it.
type outcome struct {
	testing.TB
	fatal, skip string
}

func (o *outcome) Fatalf(format string, args ...any) { o.fatal = fmt.Sprintf(format, args...) }
func (o *outcome) Skipf(format string, args ...any)  { o.skip = fmt.Sprintf(format, args...) }

func TestMissingFailsInCI(t *testing.T) {
	tests := []struct {
		ci       string
		wantFail bool
	}{
		{"true", true},
		{"", false},
		{"false", false},
		{"1", false}, // only "true", as the services set it
	}
	for _, tt := range tests {
		o := &outcome{TB: t}
		missing(o, tt.ci, "shared/measurements", "/repo")
		if gotFail := o.fatal != ""; gotFail != tt.wantFail || (o.skip != "") == tt.wantFail {
			t.Errorf("CI=%q: fatal %q, skip %q; want fail = %v", tt.ci, o.fatal, o.skip, tt.wantFail)
		}
		if tt.wantFail && !strings.Contains(o.fatal, "the shared data is required in CI") {
			t.Errorf("CI=%q: the failure does not say the shared data is required in CI: %q", tt.ci, o.fatal)
		}
	}
}

func TestFindWalksUp(t *testing.T) {
	root := t.TempDir()
	deep := filepath.Join(root, "a", "b", "c")
	if err := os.MkdirAll(filepath.Join(root, "shared", "measurements"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	p, ok := find(deep, filepath.Join("shared", "measurements"))
	if !ok || p != filepath.Join(root, "shared", "measurements") {
		t.Errorf("find = %q, %v; want the directory three levels up", p, ok)
	}
	if _, ok := find(deep, filepath.Join("shared", "nothing")); ok {
		t.Error("find found a directory that does not exist")
	}
}
