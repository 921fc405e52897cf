package report

import "fmt"

// Duration is ns nanoseconds as the trace command and the trace page print
// them: three significant figures or so ("1.234 s", "12.35 ms", "3.2 µs").
func Duration(ns int64) string {
	neg := ""
	if ns < 0 {
		neg, ns = "-", -ns
	}
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%s%.3f s", neg, float64(ns)/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%s%.2f ms", neg, float64(ns)/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%s%.1f µs", neg, float64(ns)/1e3)
	}
	return fmt.Sprintf("%s%d ns", neg, ns)
}
