package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/trace"
)

// A gzipped trace whose trailer (CRC-32, then the length mod 2^32) does not
// match its content is corrupt, even when the JSON inside reads to its end:
// the gzip reader checks the trailer only once it is read to EOF.
func TestTraceGzipTrailerChecked(t *testing.T) {
	good, err := os.ReadFile(scratchTestTrace)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := analyzeTraceFile(context.Background(), scratchTestTrace, nil, trace.Options{}, t.TempDir()); err != nil {
		t.Fatalf("the intact trace: %v", err)
	}
	for _, tt := range []struct {
		name string
		at   int // byte from the end to flip
	}{{"crc", 8}, {"size", 2}} {
		t.Run(tt.name, func(t *testing.T) {
			b := append([]byte(nil), good...)
			b[len(b)-tt.at] ^= 0xff
			path := filepath.Join(t.TempDir(), "bad-"+tt.name+".json.gz")
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			_, err := analyzeTraceFile(context.Background(), path, nil, trace.Options{}, root)
			if !errors.Is(err, trace.ErrCorrupt) || !strings.Contains(err.Error(), path) {
				t.Errorf("analyzeTraceFile = %v, want trace.ErrCorrupt naming %s", err, path)
			}
			emptyDir(t, root, "after a corrupt trace")
		})
	}
}
