package cli

import (
	"errors"
	"os"

	"github.com/canifinetune/canifinetune/estimate"
)

// lengthsFromFlags is the sample-length distribution --seq-len-p50 or
// --seq-len-file describe, with --seq-len as the maximum; nil when neither
// is given.
func lengthsFromFlags(f RequestFlags) (*estimate.LengthDist, error) {
	switch {
	case f.SeqLenP50 != 0 && f.SeqLenFile != "":
		return nil, usageErrorf("--seq-len-p50 400, or --seq-len-file lengths.txt", "--seq-len-p50 and --seq-len-file both describe the lengths: give one")
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
