package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/evidence"
	"github.com/google/go-cmp/cmp"
)

// TestDeviceCasesAreTheirReceipts converts every success and OOM receipt in
// evidence/device/*/receipts again and compares the cases with the folder's
// cases.jsonl, so the committed cases cannot drift from the GPU's receipts
// (or be edited by hand), and no receipt is left out of them.
func TestDeviceCasesAreTheirReceipts(t *testing.T) {
	deviceSessions(t, "cases.jsonl", func(session string, data []byte, receipts []Receipt) {
		stored, err := evidence.ReadCases(bytes.NewReader(data), "cases.jsonl")
		if err != nil {
			t.Fatal(err)
		}
		byID := map[string]evidence.Case{}
		for _, c := range stored {
			byID[c.ID] = c
		}
		converted := 0
		for _, r := range receipts {
			c, err := ToCase(r)
			if r.Status != StatusSuccess && r.Status != StatusOOM {
				if err == nil {
					t.Errorf("%s: a %s receipt became a case", r.ID, r.Status)
				}
				if _, ok := byID[r.ID]; ok {
					t.Errorf("%s receipt %s is in cases.jsonl", r.Status, r.ID)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", r.ID, err)
			}
			converted++
			want, ok := byID[c.ID]
			if !ok {
				t.Errorf("case %s is not in %s/cases.jsonl", c.ID, session)
				continue
			}
			if diff := cmp.Diff(roundTrip(t, want), roundTrip(t, c)); diff != "" {
				t.Errorf("%s: cases.jsonl differs from the receipt's case (-stored +receipt):\n%s", r.ID, diff)
			}
		}
		if converted != len(stored) {
			t.Errorf("%s: %d receipts are cases, cases.jsonl holds %d", session, converted, len(stored))
		}
		// One JSON object per line, as bench --to-case appends them.
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); line != "" && !json.Valid([]byte(line)) {
				t.Errorf("%s/cases.jsonl: a line is not JSON: %.80s", session, line)
			}
		}
	})
}

// TestDeviceThroughputIsTheReceipts: each session's throughput.jsonl is
// bench --to-throughput of its success receipts, in cases.jsonl's order.
func TestDeviceThroughputIsTheReceipts(t *testing.T) {
	deviceSessions(t, "throughput.jsonl", func(session string, data []byte, receipts []Receipt) {
		stored, err := evidence.ReadThroughput(bytes.NewReader(data), "throughput.jsonl")
		if err != nil {
			t.Fatal(err)
		}
		byID := map[string]evidence.ThroughputCase{}
		for _, c := range stored {
			byID[c.ID] = c
		}
		n := 0
		for _, r := range receipts {
			tc, err := ToThroughput(r)
			if err != nil {
				if _, ok := byID[r.ID]; ok {
					t.Errorf("%s: not a speed case (%v) but in throughput.jsonl", r.ID, err)
				}
				continue
			}
			n++
			if diff := cmp.Diff(byID[tc.ID], tc); diff != "" {
				t.Errorf("%s: throughput.jsonl differs from the receipt's speed case (-stored +receipt):\n%s", r.ID, diff)
			}
		}
		if n != len(stored) {
			t.Errorf("%s: %d receipts are speed cases, throughput.jsonl holds %d", session, n, len(stored))
		}
	})
}

// deviceSessions calls f with each evidence/device session folder, one of
// its files read (name), and the session's receipts, failing when there is
// none.
func deviceSessions(t *testing.T, name string, f func(session string, data []byte, receipts []Receipt)) {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join("..", "evidence", "device", "*", "receipts"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no evidence/device/*/receipts folders (%v)", err)
	}
	for _, dir := range dirs {
		session := filepath.Dir(dir)
		data, err := os.ReadFile(filepath.Join(session, name))
		if err != nil {
			t.Fatal(err)
		}
		paths, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		var rs []Receipt
		for _, p := range paths {
			r, err := ReadReceipt(p)
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			rs = append(rs, r)
		}
		f(session, data, rs)
	}
}
