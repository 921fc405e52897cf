// Package atomicfile writes a file so that a reader never sees it half
// written and a failed write leaves neither a partial file nor a damaged
// previous version: the bytes go to a temporary file in the same directory,
// are synced, and the temporary file is renamed over the target.
//
// Write replaces the name it is given, whatever is there (a cache's own
// files). WriteOutput is for a file the user named (-o, --receipt), where a
// rename would do the wrong thing to what the name points at:
//
//   - a new name or a regular file is replaced atomically, as by Write;
//   - a symlink is followed: its final target is replaced atomically and the
//     link stays (a rename over the link would silently turn it into a
//     regular file beside the file the user meant); a symlink to nothing is
//     refused;
//   - a device, a FIFO or any name under /dev or /proc (/dev/stdout,
//     /dev/null, /proc/self/fd/1) is written in place: there is nothing to
//     rename over, so that write is not atomic;
//   - a directory is refused.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Write writes b to path atomically with permissions perm, replacing the
// name itself (a symlink at path is replaced, not followed).
func Write(path string, b []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, werr := f.Write(b)
	serr := f.Sync()
	cerr := f.Close()
	err = errors.Join(werr, serr, cerr)
	if err == nil {
		err = os.Chmod(tmp, perm)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// WriteOutput writes b to the file a user named, atomically where a rename
// can do it (see the package comment for symlinks, devices and FIFOs).
func WriteOutput(path string, b []byte, perm os.FileMode) error {
	target, inPlace, err := resolveOutput(path)
	if err != nil {
		return err
	}
	if f := stdStream(path); f != nil {
		// The process's own stream, sharing its file offset with what the
		// program prints: opening /dev/stdout anew when the shell redirected it
		// to a file would start a second offset and the two would overwrite
		// each other.
		if _, err := f.Write(b); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		return nil
	}
	if !inPlace {
		if target != path {
			if err := Write(target, b, perm); err != nil {
				return fmt.Errorf("write %s (the target of symlink %s): %w", target, path, err)
			}
			return nil
		}
		return Write(path, b, perm)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, werr := f.Write(b)
	if err := errors.Join(werr, f.Close()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// CheckOutput reports whether WriteOutput could write path, without
// writing it: for a file replaced atomically it creates and removes a
// temporary file beside the target, so a command can refuse before work
// whose result would be lost (a probe that runs for minutes).
func CheckOutput(path string) error {
	target, inPlace, err := resolveOutput(path)
	if err != nil || inPlace {
		return err // a device or FIFO is opened only when written: opening a FIFO blocks until it has a reader
	}
	f, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".check-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	name := f.Name()
	f.Close()
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// resolveOutput says where WriteOutput writes path: target is the file to
// replace atomically (path itself, or the final target of a symlink), or
// inPlace is true and path is opened and written as it is.
func resolveOutput(path string) (target string, inPlace bool, err error) {
	if underDevOrProc(path) {
		if fi, err := os.Stat(path); err == nil && fi.IsDir() {
			return "", false, fmt.Errorf("write %s: is a directory", path)
		}
		return path, true, nil
	}
	lfi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return path, false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("write %s: %w", path, err)
	}
	fi := lfi
	if lfi.Mode()&fs.ModeSymlink != 0 {
		if fi, err = os.Stat(path); err != nil {
			return "", false, fmt.Errorf("write %s: a symlink whose target cannot be reached (%w); refusing to replace the link with a file", path, err)
		}
	}
	switch {
	case fi.IsDir():
		return "", false, fmt.Errorf("write %s: is a directory", path)
	case !fi.Mode().IsRegular():
		return path, true, nil // a device, FIFO or socket, or a symlink to one
	case lfi.Mode()&fs.ModeSymlink == 0:
		return path, false, nil
	}
	target, err = filepath.EvalSymlinks(path)
	if err != nil {
		return "", false, fmt.Errorf("write %s: resolve symlink: %w", path, err)
	}
	if underDevOrProc(target) {
		return path, true, nil // /dev/stdout → /proc/self/fd/1 → a file the shell redirected to
	}
	return target, false, nil
}

// stdStream is os.Stdout or os.Stderr when path names this process's
// standard output or error, else nil.
func stdStream(path string) *os.File {
	switch filepath.Clean(path) {
	case "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1":
		return os.Stdout
	case "/dev/stderr", "/dev/fd/2", "/proc/self/fd/2":
		return os.Stderr
	}
	return nil
}

// underDevOrProc reports whether path names a file under /dev or /proc:
// streams and kernel files, which are written in place, never replaced.
func underDevOrProc(path string) bool {
	abs, err := filepath.Abs(path)
	if err != nil {
		return false
	}
	for _, root := range []string{"/dev", "/proc"} {
		if abs == root || strings.HasPrefix(abs, root+string(filepath.Separator)) {
			return true
		}
	}
	return false
}
