//go:build !unix

package localfile

import "testing"

func mkfifo(*testing.T, string) (string, bool) { return "", false }
