package web_test

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/canifinetune/canifinetune/web"
)

// TestRecipeAPI: /api/plan/recipe answers with a zip of exactly the files
// plan --emit writes for the same query and rank, and refuses what the
// command refuses, with the status that fits.
func TestRecipeAPI(t *testing.T) {
	ts := newServer(t, web.Options{})
	status, body := get(t, ts, "GET", "/api/plan/recipe?"+planQuery+"&plan=2", "", nil)
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	zr, err := zip.NewReader(bytes.NewReader(body), int64(len(body)))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		b.ReadFrom(rc)
		rc.Close()
		name := strings.TrimPrefix(f.Name, "recipe/")
		got[name] = b.String()
		exec := f.Mode()&0o100 != 0
		if want := strings.HasSuffix(name, ".sh") || strings.HasSuffix(name, ".py"); exec != want {
			t.Errorf("%s: executable %v, want %v", f.Name, exec, want)
		}
	}
	dir := filepath.Join(t.TempDir(), "out")
	if _, code := cliRun(t, "plan", "Qwen/Qwen2.5-7B", "--gpu", "rtx-4090", "--dataset-tokens", "1e8", "--emit", dir, "--emit-plan", "2"); code != 0 {
		t.Fatalf("plan --emit exit %d", code)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		want[e.Name()] = string(b)
	}
	if len(want) < 8 {
		t.Fatalf("plan --emit wrote %d files", len(want))
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("the zip differs from plan --emit (-cli +zip):\n%s", d)
	}
	if !strings.Contains(got["README.txt"], "Qwen/Qwen2.5-7B") {
		t.Errorf("README.txt does not name the model")
	}

	for _, tc := range []struct {
		name, method, path string
		status             int
		field, msg, hint   string
	}{
		{"rank zero", "GET", "/api/plan/recipe?" + planQuery + "&plan=0", 400, "plan", "want a plan's rank", ""},
		{"rank past the plans", "GET", "/api/plan/recipe?" + planQuery + "&plan=100000", 400, "plan", "--emit-plan 100000: only", ""},
		{"maximize", "GET", "/api/plan/recipe?" + planQuery + "&maximize=seq-len", 400, "maximize", "maximize ranks none", ""},
		{"no plan fits", "GET", "/api/plan/recipe?model=meta-llama/Llama-3.1-70B&method=full&gpu=rtx-4090&dataset-tokens=1e8", 422, "", "no plan fits", ""},
		{"no equivalent", "GET", "/api/plan/recipe?model=meta-llama/Llama-3.1-70B&method=full&gpus=8xA100-80GB&dataset-tokens=1e8", 422, "",
			"precision bf16-true: DeepSpeed ZeRO keeps fp32 master weights", "--emit-plan"},
		{"hub model", "GET", "/api/plan/recipe?model=someone/else&gpu=rtx-4090&dataset-tokens=1e8", 404, "model", "", ""},
		{"post", "POST", "/api/plan/recipe", 405, "", "not allowed", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, b := get(t, ts, tc.method, tc.path, "application/json", strings.NewReader("{}"))
			var p problem
			if err := json.Unmarshal(b, &p); err != nil {
				t.Fatalf("status %d, body %.200s: %v", status, b, err)
			}
			if status != tc.status || p.Field != tc.field || !strings.Contains(p.Error, tc.msg) || !strings.Contains(p.Hint, tc.hint) {
				t.Errorf("status %d field %q error %q hint %q; want %d %q containing %q, hint with %q", status, p.Field, p.Error, p.Hint, tc.status, tc.field, tc.msg, tc.hint)
			}
		})
	}

	// The plan view links each row to its zip, with the page's query.
	_, page := get(t, ts, "GET", "/plan?"+planQuery, "", nil)
	if !strings.Contains(string(page), `href="/api/plan/recipe?dataset-tokens=1e8&amp;gpu=rtx-4090&amp;model=Qwen%2FQwen2.5-7B&amp;plan=1"`) {
		t.Errorf("the plan view has no download link for plan 1")
	}
}
