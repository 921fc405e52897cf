package cli

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
//
// Each script gets CANIFINETUNE_TOOL_PATH=$WORK/bin, so doctor finds only the
// fake nvidia-smi / rocm-smi / python a script writes there, never the
// host's: the scripts pass the same on a laptop and on a GPU server.
func TestScript(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: false,
		Setup: func(e *testscript.Env) error {
			e.Setenv("NO_COLOR", "1")
			e.Setenv("CANIFINETUNE_TOOL_PATH", filepath.Join(e.WorkDir, "bin"))
			// $DEV is the project's development cohort, for validate and calibrate scripts.
			dev, err := filepath.Abs("../../evidence/dev.jsonl")
			if err != nil {
				return err
			}
			e.Setenv("DEV", dev)
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits": cmdExits,
		},
	})
}

// cmdExits is `exits N prog args...` (as in the trace branch): it runs prog and fails unless it
// exits with N, so scripts can check the documented exit codes (testscript's
// `!` only says "non-zero"). stdout and stderr are kept for the next checks.
func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits N prog [args...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exits: %q is not a number", args[0])
	}
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exits: run %s: %v", args[1], err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited with %d, want %d", args[1], got, want)
	}
}
