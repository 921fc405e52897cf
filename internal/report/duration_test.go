package report

import "testing"

func TestDuration(t *testing.T) {
	for _, c := range []struct {
		ns   int64
		want string
	}{
		{0, "0 ns"},
		{999, "999 ns"},
		{1500, "1.5 µs"},
		{12_345_678, "12.35 ms"},
		{1_234_567_890, "1.235 s"},
		{-2_000_000, "-2.00 ms"},
	} {
		if got := Duration(c.ns); got != c.want {
			t.Errorf("Duration(%d) = %q, want %q", c.ns, got, c.want)
		}
	}
}
