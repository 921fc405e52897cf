// Package localfile reads the local files a user points the tool at (a
// checkpoint directory's config.json, its safetensors index and shard
// headers, the Hugging Face cache's copies of them) with the bounds the Hub
// client puts on downloads. It refuses anything but a regular file: a FIFO
// would block the read forever, a device such as /dev/zero never ends, and a
// directory is no file at all. Whole-file reads are capped, so a 500 MB
// config.json costs an error, not a gigabyte of memory.
//
// It sits at the edge, with the other I/O; the parsers are handed bytes.
package localfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// MaxJSON caps a JSON file read whole (config.json, the safetensors index,
// a cached header): the largest real ones are a few megabytes (an index of
// tens of thousands of tensors), and the Hub client applies the same cap to
// the same files when it downloads them.
const MaxJSON = 64 << 20

// Sentinel errors, wrapped in an *fs.PathError that names the file.
var (
	// ErrNotRegular: the path is a directory, a FIFO, a device or a socket.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge: the file is larger than the cap for its kind.
	ErrTooLarge = errors.New("file too large")
)

// Open opens name for reading and returns it with its FileInfo, refusing
// anything but a regular file. Opening never blocks on a FIFO: it is opened
// non-blocking where the system has FIFOs, and checked before reading.
func Open(name string) (*os.File, fs.FileInfo, error) {
	f, err := open(name)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: it is %s", ErrNotRegular, kind(fi.Mode()))}
	}
	return f, fi, nil
}

// ReadFile reads the regular file name whole, refusing one over limit bytes.
// The limit holds even for a file that grows while it is read.
func ReadFile(name string, limit int64) ([]byte, error) {
	f, fi, err := Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tooLarge := func() error {
		return &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: over the %s limit", ErrTooLarge, size(limit))}
	}
	if fi.Size() > limit {
		return nil, tooLarge()
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	if int64(len(b)) > limit {
		return nil, tooLarge()
	}
	return b, nil
}

// kind names a non-regular file type for an error message.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeDevice != 0, m&fs.ModeCharDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "not a regular file (mode " + m.String() + ")"
}

// size writes a byte limit in MiB when it is a whole number of them.
func size(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d-byte", n)
}
