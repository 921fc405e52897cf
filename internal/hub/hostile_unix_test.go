//go:build unix

package hub

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestTokenFileFIFO: a FIFO as the token file is refused at once; opening
// it to read would block until some writer came.
func TestTokenFileFIFO(t *testing.T) {
	home := t.TempDir()
	fifo := filepath.Join(home, "token")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip(err)
	}
	_, err := NewFromEnv(func(k string) string { return map[string]string{"HOME": home, "HF_TOKEN_PATH": fifo}[k] })
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("err = %v; want a refusal: not a regular file", err)
	}
}
