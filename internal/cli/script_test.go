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

// TestScript runs every testdata/script/*.txtar end to end. Each script gets
// its own fake Hub (see newFakeHub) as HF_ENDPOINT and an empty Hugging Face
// cache under $WORK/hf, so no script touches the network or the user's cache.
func TestScript(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: false,
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
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			// mksafetensors FILE name:d1xd2… writes a BF16 safetensors file
			// whose data is a sparse run of zeros.
			"mksafetensors": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) < 2 {
					ts.Fatalf("usage: mksafetensors FILE name:d1xd2...")
				}
				ts.Check(writeSafetensors(ts.MkAbs(args[0]), args[1:]))
			},
		},
	})
}
