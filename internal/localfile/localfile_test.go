package localfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "config.json")
	if err := os.WriteFile(name, []byte(`{"a":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int64{7, MaxJSON} {
		b, err := ReadFile(name, limit)
		if err != nil || string(b) != `{"a":1}` {
			t.Errorf("limit %d: ReadFile = %q, %v", limit, b, err)
		}
	}
	if _, err := ReadFile(name, 6); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), name) {
		t.Errorf("one byte over the limit: err = %v, want ErrTooLarge naming %s", err, name)
	}
	if _, err := ReadFile(filepath.Join(dir, "absent.json"), MaxJSON); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("absent: err = %v, want fs.ErrNotExist", err)
	}
}

// TestReadFileCapsLargeFile: a file over the cap is refused from its size,
// before anything is read (a sparse file here, so the test writes nothing).
func TestReadFileCapsLargeFile(t *testing.T) {
	name := filepath.Join(t.TempDir(), "config.json")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxJSON + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = ReadFile(name, MaxJSON)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "64 MiB") || !strings.Contains(err.Error(), name) {
		t.Errorf("err = %v, want ErrTooLarge naming the file and the 64 MiB cap", err)
	}
}

// TestRefusesNonRegular: a directory, a FIFO without a writer (which made
// the read block forever) and a device such as /dev/zero (which never ends)
// are refused, naming the path and what it is.
func TestRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]string{filepath.Join(dir, "sub"): "directory"}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if p, ok := mkfifo(t, dir); ok {
		cases[p] = "named pipe"
	}
	// A device where the system has one (a sandbox may lack it).
	if fi, err := os.Stat("/dev/zero"); err == nil && fi.Mode()&fs.ModeDevice != 0 {
		link := filepath.Join(dir, "zero.json")
		if err := os.Symlink("/dev/zero", link); err == nil {
			cases[link] = "device"
		}
	}
	for name, what := range cases {
		_, err := ReadFile(name, MaxJSON)
		if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), what) {
			t.Errorf("ReadFile(%s): err = %v, want ErrNotRegular naming the path and %q", name, err, what)
		}
		if f, _, err := Open(name); err == nil {
			f.Close()
			t.Errorf("Open(%s) accepted a %s", name, what)
		}
	}
}

func TestOpen(t *testing.T) {
	name := filepath.Join(t.TempDir(), "model.safetensors")
	if err := os.WriteFile(name, make([]byte, 100), 0o644); err != nil {
		t.Fatal(err)
	}
	f, fi, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [10]byte
	if n, err := f.ReadAt(b[:], 90); n != 10 || err != nil || fi.Size() != 100 {
		t.Errorf("ReadAt = %d, %v; size %d", n, err, fi.Size())
	}
}
