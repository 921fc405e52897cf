package evidence

import (
	"encoding/json"
	"errors"
	"fmt"
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
	switch {
	case c.SchemaVersion != 1:
		return nil, fmt.Errorf("%s: %w: field schema_version: %d (want 1)", name, ErrBadCalibration, c.SchemaVersion)
	case c.Estimator != "canifinetune":
		return nil, fmt.Errorf("%s: %w: field estimator: %q (calibrations are for the default estimator, canifinetune)", name, ErrBadCalibration, c.Estimator)
	case len(c.Domain.ModelTypes) == 0 || len(c.Domain.Methods) == 0:
		return nil, fmt.Errorf("%s: %w: field domain: empty (a calibration must say where it applies)", name, ErrBadCalibration)
	}
	k := c.Coefficients
	for _, v := range CoefficientRows(k) {
		if !(v.Value >= 0) || v.Value > 1e3 {
			return nil, fmt.Errorf("%s: %w: field coefficients.%s: %v", name, ErrBadCalibration, v.Name, v.Value)
		}
	}
	if k.ActGated == 0 || k.ActClassic == 0 || k.FullScale == 0 {
		return nil, fmt.Errorf("%s: %w: field coefficients: activation coefficients must be positive", name, ErrBadCalibration)
	}
	return &c, nil
}
