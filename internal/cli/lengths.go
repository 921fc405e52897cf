package cli

import (
	"errors"
	"os"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/evidence"
)

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// lengthsFromFlags is the sample-length distribution --seq-len-p50,
// --seq-len-file or --seq-len-dataset describe, with --seq-len as the
// maximum; nil when none is given.
func lengthsFromFlags(f RequestFlags) (*estimate.LengthDist, error) {
	given := b2i(f.SeqLenP50 != 0) + b2i(f.SeqLenFile != "") + b2i(f.SeqLenData != nil)
	switch {
	case given > 1:
		return nil, usageErrorf("--seq-len-p50 400, or --seq-len-file lengths.txt, or --seq-len-dataset alpaca-cleaned", "--seq-len-p50, --seq-len-file and --seq-len-dataset each describe the lengths: give one")
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
