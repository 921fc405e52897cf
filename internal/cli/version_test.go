package cli

import (
	"bytes"
	"regexp"
	"runtime/debug"
	"testing"
)

func TestToolVersion(t *testing.T) {
	info := func(v string, settings ...debug.BuildSetting) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			return &debug.BuildInfo{Main: debug.Module{Path: "github.com/canifinetune/canifinetune", Version: v}, Settings: settings}, true
		}
	}
	rev := debug.BuildSetting{Key: "vcs.revision", Value: "f8ff652c62ea85b56fb7dff96ad3da863796d8ad"}
	dirty := debug.BuildSetting{Key: "vcs.modified", Value: "true"}
	clean := debug.BuildSetting{Key: "vcs.modified", Value: "false"}
	tests := []struct {
		name    string
		stamped string
		read    func() (*debug.BuildInfo, bool)
		want    string
	}{
		{"ldflags stamp wins", "v1.2.3", info("v0.9.0", rev), "v1.2.3"},
		{"go install at a tag", "", info("v0.4.1"), "v0.4.1"},
		{"clone with revision", "", info("(devel)", rev, clean), "(devel) f8ff652c62ea"},
		{"clone with edits", "", info("(devel)", rev, dirty), "(devel) f8ff652c62ea+dirty"},
		{"no vcs stamp", "", info("(devel)"), "(devel)"},
		{"empty main version", "", info(""), "(devel)"},
		{"no build info", "", func() (*debug.BuildInfo, bool) { return nil, false }, "(devel)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := toolVersion(tt.stamped, tt.read); got != tt.want {
				t.Errorf("toolVersion = %q, want %q", got, tt.want)
			}
		})
	}
}

// --version labels the tool's version and each estimator's, so that the
// estimator's version on the first line of `estimate` is not read as the
// tool's.
func TestVersionFlagLabelsEach(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"--version"}, Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}); code != 0 {
		t.Fatalf("--version exited %d: %s", code, errb.String())
	}
	want := regexp.MustCompile(`^canifinetune tool \S.*\nestimators: canifinetune \S+ \(default\), seed000 \S+, unsloth \S+\n$`)
	if !want.MatchString(out.String()) {
		t.Errorf("--version printed %q, want it to match %s", out.String(), want)
	}
}
