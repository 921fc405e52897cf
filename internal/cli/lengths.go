package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/evidence"
)

// lengthsFrom says which flag gave the length distribution, for the
// report: "dataset NAME", "file PATH" or "median"; "" for none.
func lengthsFrom(f RequestFlags) string {
	switch {
	case f.SeqLenData != nil:
		return "dataset " + *f.SeqLenData
	case f.SeqLenFile != "":
		return "file " + f.SeqLenFile
	case f.SeqLenP50 != 0:
		return "median"
	}
	return ""
}

// lengthArgs are the flags that give a request's lengths, as a command line
// that repeats it writes them.
func lengthArgs(f RequestFlags) []string {
	switch {
	case f.SeqLenData != nil:
		return []string{"--seq-len-dataset", *f.SeqLenData}
	case f.SeqLenFile != "":
		return []string{"--seq-len-file", f.SeqLenFile}
	case f.SeqLenP50 != 0:
		return []string{"--seq-len-p50", fmt.Sprint(f.SeqLenP50)}
	case f.Dynamic:
		return []string{"--dynamic-padding"}
	}
	return nil
}

// lengthsFromFlags is the sample-length distribution --seq-len-p50,
// --seq-len-file or --seq-len-dataset describe, with --seq-len as the
// maximum; nil when none is given.
func lengthsFromFlags(f RequestFlags) (*estimate.LengthDist, error) {
	var given []string
	for _, g := range []struct {
		set  bool
		name string
	}{{f.SeqLenP50 != 0, "--seq-len-p50"}, {f.SeqLenFile != "", "--seq-len-file"}, {f.SeqLenData != nil, "--seq-len-dataset"}} {
		if g.set {
			given = append(given, g.name)
		}
	}
	switch {
	case len(given) > 1:
		return nil, usageErrorf("--seq-len-p50 400, or --seq-len-file lengths.txt, or --seq-len-dataset alpaca-cleaned", "%s each describe the lengths: give one", strings.Join(given, " and "))
	case f.SeqLenData != nil:
		d, err := evidence.Histogram(*f.SeqLenData)
		if err != nil {
			return nil, usageErrorf("--seq-len-dataset alpaca-cleaned", "--seq-len-dataset: %v", err)
		}
		return &d, nil
	case f.SeqLenP50 != 0:
		d, err := estimate.LengthsMedianMax(f.SeqLenP50, f.SeqLen)
		if err != nil {
			return nil, usageErrorf("--seq-len 2048 --seq-len-p50 400", "--seq-len-p50 %d with --seq-len %d: the median must lie in 1..--seq-len", f.SeqLenP50, f.SeqLen)
		}
		return &d, nil
	case f.SeqLenFile != "":
		file, err := os.Open(f.SeqLenFile)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, usageErrorf("--seq-len-file lengths.txt", "--seq-len-file %s: no such file", f.SeqLenFile)
			}
			return nil, withCode(ExitError, err)
		}
		defer file.Close()
		d, err := estimate.ParseLengths(file, f.SeqLenFile)
		if err != nil {
			return nil, withCode(ExitError, err)
		}
		return &d, nil
	}
	return nil, nil
}
