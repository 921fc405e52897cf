package cli_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/canifinetune/canifinetune/internal/cli"
)

// TestMain makes the test binary double as the canifinetune command, so
// scripts run the real CLI as a subprocess.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"canifinetune": func() { os.Exit(cli.Main(os.Args[1:], cli.OSEnv())) },
	})
}

// update rewrites the golden files in the scripts (cmp stdout want.json).
var update = flag.Bool("update", false, "update golden files in testdata/script/*.txtar")

// TestScript runs testdata/script/*.txtar: every command, its output, its
// errors and its exit codes, end to end.
func TestScript(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:           "testdata/script",
		Setup:         setupTraces,
		UpdateScripts: *update,
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits": cmdExits,
		},
	})
}

// cmdExits runs a command and checks its exact exit code, which plain
// `exec` / `! exec` cannot: `exits 2 canifinetune trace a b c`.
func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits CODE command [args...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exits: bad code %q", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exits: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("exit code %d, want %d", got, want)
	}
}

// setupTraces puts the real traces in $WORK/traces, with two truncated
// copies made here rather than committed: one cut inside the gzip header
// data before any event, one cut halfway through the events.
func setupTraces(env *testscript.Env) error {
	dir := filepath.Join(env.WorkDir, "traces")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	src := filepath.Join("..", "..", "trace", "testdata")
	for _, name := range []string{"hta_nccl_data_2streams_3steps.json.gz", "hta_ns_resolution_rank0_5steps.json.gz", "hta_sampled_rank0_4streams_2steps.json.gz"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	gz, err := os.ReadFile(filepath.Join(src, "hta_sampled_rank0_4streams_2steps.json.gz"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "cut_early.json.gz"), gz[:400], 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "cut_half.json.gz"), gz[:len(gz)/2], 0o644); err != nil {
		return err
	}
	// A plain (not gzipped) copy, to show detection goes by content.
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return err
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sampled.json"), plain, 0o644)
}
