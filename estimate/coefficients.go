package estimate

import (
	_ "embed"
	"encoding/json"
	"fmt"
)

//go:embed coefficients.json
var coefficientsJSON []byte

// DefaultCoefficients are the default estimator's embedded coefficients,
// produced by `go run ./cmd/canifinetune calibrate evidence/dev.jsonl
// -o estimate/coefficients.json`; TestEmbeddedCoefficientsReproduce re-runs it.
var DefaultCoefficients = mustCoefficients(coefficientsJSON)

// CoefficientsFile is the part of a calibration file the estimator reads.
type CoefficientsFile struct {
	Coefficients Coefficients `json:"coefficients"`
}

func mustCoefficients(b []byte) Coefficients {
	var f CoefficientsFile
	if err := json.Unmarshal(b, &f); err != nil {
		panic(fmt.Sprintf("embedded coefficients.json: %v", err))
	}
	return f.Coefficients
}
