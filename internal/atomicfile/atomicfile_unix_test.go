//go:build unix

package atomicfile

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Devices, FIFOs and /dev/stdout are written in place: a rename would
// replace the device node or fail, and /dev/stdout could never work.
func TestWriteOutputInPlace(t *testing.T) {
	// Never WriteOutput to /dev/null here: a broken WriteOutput run as root
	// would rename a regular file over the machine's /dev/null.
	if err := CheckOutput("/dev/null"); err != nil {
		t.Errorf("CheckOutput(/dev/null) = %v", err)
	}

	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	got := make(chan string, 1)
	go func() {
		b, _ := os.ReadFile(fifo)
		got <- string(b)
	}()
	if err := WriteOutput(fifo, []byte("through the pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("FIFO replaced: %v %v", fi, err)
	}
	if s := <-got; s != "through the pipe" {
		t.Errorf("reader of the FIFO got %q", s)
	}
	assertEntries(t, dir, "fifo")

	// /dev/stdout of a child whose stdout is a file: appended, not replaced.
	if os.Getenv("ATOMICFILE_STDOUT_CHILD") == "1" {
		return
	}
	out := filepath.Join(dir, "stdout.txt")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWriteOutputStdoutChild$")
	cmd.Env = append(os.Environ(), "ATOMICFILE_STDOUT_CHILD=1")
	cmd.Stdout = f
	err = cmd.Run()
	f.Close()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	b, _ := os.ReadFile(out)
	if !strings.Contains(string(b), "printed first\nwritten to /dev/stdout\n") {
		t.Errorf("stdout file holds %q, want the child's print followed by the -o write", b)
	}
}

// TestWriteOutputStdoutChild is the child of TestWriteOutputInPlace.
func TestWriteOutputStdoutChild(t *testing.T) {
	if os.Getenv("ATOMICFILE_STDOUT_CHILD") != "1" {
		t.Skip("run by TestWriteOutputInPlace")
	}
	os.Stdout.WriteString("printed first\n")
	if err := WriteOutput("/dev/stdout", []byte("written to /dev/stdout\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}
