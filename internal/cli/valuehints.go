package cli

import (
	"regexp"

	"github.com/canifinetune/canifinetune/internal/report"
)

var refusedValue = regexp.MustCompile(`^(--[a-z0-9-]+) must be one of .* but got "([^"]*)"`)

// valueHint is the hint for a refused flag value in kong's error message
// (report.ValueHint), or "".
func valueHint(msg string) string {
	m := refusedValue.FindStringSubmatch(msg)
	if m == nil {
		return ""
	}
	return report.ValueHint(m[1], m[2])
}
