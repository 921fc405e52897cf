package cli

import (
	"runtime/debug"
	"strings"

	"github.com/canifinetune/canifinetune/estimate"
)

// version is the tool's release version, stamped at build time:
//
//	go build -ldflags "-X github.com/canifinetune/canifinetune/internal/cli.version=v1.2.3" ./cmd/canifinetune
//
// When it is empty the version comes from the build information: the main
// module's version for `go install …@v1.2.3`, else "(devel)" with the VCS
// revision the go command stamped into a build from a clone.
var version string

// Version is the tool's version (not an estimator's: each estimator has its
// own, printed beside its name), shown by --version and recorded in receipts.
var Version = toolVersion(version, debug.ReadBuildInfo)

// toolVersion picks the version to report: the ldflags stamp, else the main
// module's version from the build information, else "(devel)", followed by
// the VCS revision (12 characters, "+dirty" for uncommitted changes) when the
// build recorded one.
func toolVersion(stamped string, read func() (*debug.BuildInfo, bool)) string {
	if stamped != "" {
		return stamped
	}
	info, ok := read()
	if !ok {
		return "(devel)"
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	if v != "(devel)" {
		return v
	}
	var rev string
	var dirty bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return v
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "+dirty"
	}
	return v + " " + rev
}

// versionLine is what --version prints: the tool's version, labelled as the
// tool's, then each estimator's own version, labelled as the estimator's, so
// that neither is taken for the other.
func versionLine() string {
	var b strings.Builder
	b.WriteString("canifinetune tool " + Version + "\nestimators:")
	for i, n := range estimate.Names() {
		e, err := estimate.ByName(n)
		if err != nil {
			continue
		}
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(" " + n + " " + e.Version())
		if n == estimate.Default {
			b.WriteString(" (default)")
		}
	}
	return b.String()
}
