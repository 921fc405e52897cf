//go:build !unix

package localfile

import (
	"fmt"
	"io/fs"
	"os"
)

// open refuses a non-regular file before opening it, where O_NONBLOCK is
// not there to keep the open itself from blocking.
func open(name string) (*os.File, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: it is %s", ErrNotRegular, kind(fi.Mode()))}
	}
	return os.Open(name)
}
