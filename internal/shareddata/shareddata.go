// Package shareddata finds, for tests, the measurement and model-config
// collection this repository is developed beside: a directory named shared
// in a directory above the working directory. Tests that check the
// repository's copies against it (the catalog's configs, the development
// cohort) use it; nothing outside tests does.
//
// Locally a missing collection skips those tests. In CI (the environment
// variable CI is "true", as CI services set it) it fails them: there the
// collection is required, and a skip would hide that the check never ran.
package shareddata

import (
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the path of shared/elem... in the nearest directory above the
// working directory that holds it. When there is none it skips the test, or
// fails it when CI is "true".
func Dir(t testing.TB, elem ...string) string {
	t.Helper()
	rel := filepath.Join(append([]string{"shared"}, elem...)...)
	start, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := find(start, rel); ok {
		return p
	}
	missing(t, os.Getenv("CI"), rel, start)
	return ""
}

// find walks up from dir to the filesystem root looking for rel.
func find(dir, rel string) (string, bool) {
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// missing reports an absent collection: a skip locally, a failure in CI.
func missing(t testing.TB, ci, rel, start string) {
	t.Helper()
	if ci == "true" {
		t.Fatalf("%s not found in any directory above %s: the shared data is required in CI (CI=true); lay the collection beside the repository", rel, start)
		return
	}
	t.Skipf("%s not found in any directory above %s; this check needs the shared data beside the repository (in CI, CI=true, it fails instead)", rel, start)
}
