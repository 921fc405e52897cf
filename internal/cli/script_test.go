package cli_test

import (
	"os"
	"testing"

	"github.com/canifinetune/canifinetune/internal/cli"
	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets testscript run this test binary as the canifinetune command.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"canifinetune": func() { os.Exit(cli.Main(os.Args[1:], cli.OSEnv())) },
	})
}

// TestScript runs the end-to-end CLI scripts in testdata/script.
func TestScript(t *testing.T) {
	testscript.Run(t, testscript.Params{Dir: "testdata/script"})
}
