package cli

import (
	"os"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets txtar scripts run the real command as `canifinetune`.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"canifinetune": func() { os.Exit(Main(os.Args[1:], OSEnv())) },
	})
}

// TestScript runs every testdata/script/*.txtar end to end.
func TestScript(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: false,
		Setup: func(e *testscript.Env) error {
			e.Setenv("NO_COLOR", "1")
			return nil
		},
	})
}
