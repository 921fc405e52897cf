package evidence

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// ErrBadCalibration is wrapped by ParseCalibration's errors.
var ErrBadCalibration = errors.New("invalid calibration file")

// ParseCalibration reads a calibration file written by `calibrate`, naming
// the file and field of whatever is wrong.
func ParseCalibration(b []byte, name string) (*Calibration, error) {
	var c Calibration
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", name, ErrBadCalibration, err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &c, nil
}

// Validate checks what ParseCalibration requires of a calibration; Fit
// checks its own result with it, so calibrate never writes a file that
// ParseCalibration refuses.
func (c *Calibration) Validate() error {
	switch {
	case c.SchemaVersion != 1:
		return fmt.Errorf("%w: field schema_version: %d (want 1)", ErrBadCalibration, c.SchemaVersion)
	case c.Estimator != "canifinetune":
		return fmt.Errorf("%w: field estimator: %q (calibrations are for the default estimator, canifinetune)", ErrBadCalibration, c.Estimator)
	case len(c.Domain.ModelTypes) == 0 || len(c.Domain.Methods) == 0:
		return fmt.Errorf("%w: field domain: empty (a calibration must say where it applies)", ErrBadCalibration)
	}
	k := c.Coefficients
	for _, v := range CoefficientRows(k) {
		if !(v.Value >= 0) || v.Value > 1e3 {
			return fmt.Errorf("%w: field coefficients.%s: %v", ErrBadCalibration, v.Name, v.Value)
		}
	}
	if k.ActGated == 0 || k.ActClassic == 0 || k.FullScale == 0 {
		return fmt.Errorf("%w: field coefficients: activation coefficients must be positive", ErrBadCalibration)
	}
	for _, g := range c.Domain.GPUMemGiB {
		if math.IsNaN(g) || math.IsInf(g, 0) || g < 0 {
			return fmt.Errorf("%w: field domain.gpu_memory_gib: %v", ErrBadCalibration, c.Domain.GPUMemGiB)
		}
	}
	return nil
}
