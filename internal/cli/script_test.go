package cli_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/canifinetune/canifinetune/internal/cli"
)

// TestMain lets the test binary act as the canifinetune command inside
// scripts (testscript.Main re-executes it under that name).
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"canifinetune": func() { os.Exit(cli.Main(os.Args[1:], cli.OSEnv())) },
	})
}

// TestScript runs the txtar scripts of testdata/script: every command end to
// end, its output and its exit code.
//
// Each script gets CANIFINETUNE_TOOL_PATH=$WORK/bin, so doctor finds only the
// fake nvidia-smi / rocm-smi / python a script writes there, never the
// host's: the scripts pass the same on a laptop and on a GPU server.
func TestScript(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(env *testscript.Env) error {
			env.Setenv("CANIFINETUNE_TOOL_PATH", filepath.Join(env.WorkDir, "bin"))
			env.Setenv("NO_COLOR", "1")
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exitcode": cmdExitCode,
		},
	})
}

// cmdExitCode is `exitcode N prog args...`: it runs prog and fails unless it
// exits with N, so scripts can check the documented exit codes (testscript's
// `!` only says "non-zero"). stdout and stderr are kept for the next checks.
func cmdExitCode(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exitcode N prog [args...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exitcode: %q is not a number", args[0])
	}
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exitcode: run %s: %v", args[1], err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited with %d, want %d", args[1], got, want)
	}
}
