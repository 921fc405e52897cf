package bench

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzReadResult feeds arbitrary probe output (as the result file and as
// stdout) to readResult: it must never panic, and what it accepts must carry a
// known status and as many update records as completed updates.
func FuzzReadResult(f *testing.F) {
	for _, name := range []string{"success", "oom", "dependency"} {
		// The canned results inside the fake Pythons are the seeds.
		b, err := os.ReadFile(filepath.Join("testdata", "fakepy", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`CANIFINETUNE_PROBE_RESULT {"probe_schema": 1, "status": "success", "completed_updates": 0, "updates": []}`))
	f.Add([]byte(`{"probe_schema": 1, "status": `))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "result.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{path, filepath.Join(dir, "absent.json")} {
			res, err := readResult(p, data)
			if err != nil {
				continue
			}
			if !res.Status.Valid() || res.CompletedUpdates != len(res.Updates) {
				t.Errorf("accepted status %q with %d completed and %d records", res.Status, res.CompletedUpdates, len(res.Updates))
			}
			var r Receipt
			r.merge(res)
			r.fillGB()
		}
	})
}
