package evidence

import (
	"bytes"
	_ "embed"
)

// devJSONL is the development cohort, embedded so that a binary can show the
// estimator's measured error without the repository beside it.
//
//go:embed dev.jsonl
var devJSONL []byte

// DevCohortName is the name the development cohort's errors carry.
const DevCohortName = "evidence/dev.jsonl"

// DevCohort reads the embedded development cohort (dev.jsonl), the cases the
// default estimator's coefficients are fitted on.
func DevCohort() ([]Case, error) {
	return ReadCases(bytes.NewReader(devJSONL), DevCohortName)
}
