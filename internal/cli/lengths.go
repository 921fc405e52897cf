package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/evidence"
)

// lengthFlag is one flag that gives a request's lengths: its name, its
// value as a command line writes it, and what the report says the lengths
// came from.
type lengthFlag struct {
	flag, value, from string
}

// lengthFlags are the length flags given (more than one is a usage error).
func lengthFlags(f RequestFlags) []lengthFlag {
	var fs []lengthFlag
	if f.SeqLenP50 != 0 {
		fs = append(fs, lengthFlag{"--seq-len-p50", fmt.Sprint(f.SeqLenP50), "median"})
	}
	if f.SeqLenFile != "" {
		fs = append(fs, lengthFlag{"--seq-len-file", f.SeqLenFile, "file " + f.SeqLenFile})
	}
	if f.SeqLenData != nil {
		fs = append(fs, lengthFlag{"--seq-len-dataset", *f.SeqLenData, "dataset " + *f.SeqLenData})
	}
	return fs
}

// lengthsFrom says which flag gave the length distribution, for the
// report: "dataset NAME", "file PATH" or "median"; "" for none.
func lengthsFrom(f RequestFlags) string {
	if fs := lengthFlags(f); len(fs) > 0 {
		return fs[0].from
	}
	return ""
}

// lengthArgs are the flags that give a request's lengths, as a command line
// that repeats it writes them.
func lengthArgs(f RequestFlags) []string {
	if fs := lengthFlags(f); len(fs) > 0 {
		return []string{fs[0].flag, fs[0].value}
	}
	if f.Dynamic {
		return []string{"--dynamic-padding"}
	}
	return nil
}

// lengthsFromFlags is the sample-length distribution --seq-len-p50,
// --seq-len-file or --seq-len-dataset describe, with --seq-len as the
// maximum; nil when none is given.
func lengthsFromFlags(f RequestFlags) (*estimate.LengthDist, error) {
	var given []string
	for _, g := range lengthFlags(f) {
		given = append(given, g.flag)
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
