package cli

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets txtar scripts run the real command as `canifinetune`.
// With CANIFINETUNE_TEST_MAIN=1 the test binary is the command itself, for
// tests that signal a real process (bench_signal_test.go).
func TestMain(m *testing.M) {
	if os.Getenv("CANIFINETUNE_TEST_MAIN") == "1" {
		os.Exit(Main(os.Args[1:], OSEnv()))
	}
	testscript.Main(m, map[string]func(){
		"canifinetune": func() { os.Exit(Main(os.Args[1:], OSEnv())) },
	})
}

// TestScript runs every testdata/script/*.txtar end to end.
//
//   - Each script gets its own fake Hub (see newFakeHub) as HF_ENDPOINT and an
//     empty Hugging Face cache under $WORK/hf, so no script touches the
//     network or the user's cache.
//   - CANIFINETUNE_TOOL_PATH=$WORK/bin, so doctor finds only the fake
//     nvidia-smi / rocm-smi / python a script writes there, never the host's.
//   - $DEV is the project's development cohort, for validate and calibrate.
//   - $TRACES holds the real Kineto traces, for trace.
//   - -update rewrites the golden files that scripts compare with cmp.
func TestScript(t *testing.T) {
	dev, err := filepath.Abs("../../evidence/dev.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	traces, err := filepath.Abs("../../trace/testdata")
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: false,
		UpdateScripts:       *update,
		Setup: func(e *testscript.Env) error {
			srv, err := newFakeHub()
			if err != nil {
				return err
			}
			e.Defer(srv.Close)
			e.Setenv("NO_COLOR", "1")
			e.Setenv("HF_ENDPOINT", srv.URL)
			e.Setenv("HF_HOME", e.WorkDir+"/hf")
			e.Setenv("FAKE_HF_TOKEN", fakeGoodToken)
			e.Setenv("CANIFINETUNE_TOOL_PATH", filepath.Join(e.WorkDir, "bin"))
			e.Setenv("DEV", dev)
			e.Setenv("TRACES", traces)
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits": cmdExits,
			// cut SRC DST N|half writes the first N bytes (or half) of SRC:
			// truncated traces are made, not committed.
			"cut": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) != 3 {
					ts.Fatalf("usage: cut SRC DST N|half")
				}
				b, err := os.ReadFile(ts.MkAbs(args[0]))
				ts.Check(err)
				n := len(b) / 2
				if args[2] != "half" {
					n, err = strconv.Atoi(args[2])
					ts.Check(err)
				}
				ts.Check(os.WriteFile(ts.MkAbs(args[1]), b[:min(n, len(b))], 0o644))
			},
			// gunzip SRC DST decompresses a gzipped trace.
			"gunzip": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) != 2 {
					ts.Fatalf("usage: gunzip SRC DST")
				}
				f, err := os.Open(ts.MkAbs(args[0]))
				ts.Check(err)
				defer f.Close()
				zr, err := gzip.NewReader(f)
				ts.Check(err)
				b, err := io.ReadAll(zr)
				ts.Check(err)
				ts.Check(os.WriteFile(ts.MkAbs(args[1]), b, 0o644))
			},
			// mksafetensors FILE name:d1xd2… writes a BF16 safetensors file
			// whose data is a sparse run of zeros.
			"mksafetensors": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) < 2 {
					ts.Fatalf("usage: mksafetensors FILE name:d1xd2...")
				}
				ts.Check(writeSafetensors(ts.MkAbs(args[0]), args[1:]))
			},
			// mkheader FILE HEADER N writes a safetensors file whose JSON
			// header is the text of HEADER (its final newline dropped) and
			// whose data section is a sparse run of N zero bytes: hostile
			// headers the tensor writer of mksafetensors would never make.
			"mkheader": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) != 3 {
					ts.Fatalf("usage: mkheader FILE HEADER N")
				}
				hdr := bytes.TrimSuffix([]byte(ts.ReadFile(args[1])), []byte("\n"))
				n, err := strconv.ParseInt(args[2], 10, 64)
				ts.Check(err)
				b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
				b = append(b, hdr...)
				ts.Check(os.WriteFile(ts.MkAbs(args[0]), b, 0o644))
				ts.Check(os.Truncate(ts.MkAbs(args[0]), int64(len(b))+n))
			},
			// sparse FILE N writes a file of N zero bytes without writing
			// them: oversized inputs are made, not committed.
			"sparse": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) != 2 {
					ts.Fatalf("usage: sparse FILE N")
				}
				n, err := strconv.ParseInt(args[1], 10, 64)
				ts.Check(err)
				ts.Check(os.MkdirAll(filepath.Dir(ts.MkAbs(args[0])), 0o755))
				f, err := os.Create(ts.MkAbs(args[0]))
				ts.Check(err)
				ts.Check(errors.Join(f.Truncate(n), f.Close()))
			},
			// [!] grepdir TEXT DIR: some file under DIR contains TEXT (with
			// !, none does), to prove a secret never reached the cache.
			"grepdir": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 2 {
					ts.Fatalf("usage: grepdir TEXT DIR")
				}
				var found []string
				err := filepath.WalkDir(ts.MkAbs(args[1]), func(p string, d fs.DirEntry, err error) error {
					if err != nil || d.IsDir() {
						return err
					}
					b, err := os.ReadFile(p)
					if err == nil && bytes.Contains(b, []byte(args[0])) {
						found = append(found, p)
					}
					return nil
				})
				ts.Check(err)
				if neg && len(found) > 0 {
					ts.Fatalf("%q found in %v", args[0], found)
				}
				if !neg && len(found) == 0 {
					ts.Fatalf("%q found in no file under %s", args[0], args[1])
				}
			},
		},
	})
}

// cmdExits is `exits N prog args...`: it runs prog and fails unless it exits
// with N, so scripts can check the documented exit codes (testscript's `!`
// only says "non-zero"). stdout and stderr are kept for the next checks.
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
