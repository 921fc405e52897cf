//go:build unix

package localfile

import (
	"path/filepath"
	"syscall"
	"testing"
)

func mkfifo(t *testing.T, dir string) (string, bool) {
	p := filepath.Join(dir, "fifo.json")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Logf("mkfifo: %v; FIFO case skipped", err)
		return "", false
	}
	return p, true
}
