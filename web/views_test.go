package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/canifinetune/canifinetune/gpu/probe"
	"github.com/canifinetune/canifinetune/internal/cli"
	"github.com/canifinetune/canifinetune/internal/report"
	"github.com/canifinetune/canifinetune/web"
)

// newServer is a test server with the command line's backend, as serve
// builds it; tools come from an empty directory, so no nvidia-smi runs.
func newServer(t testing.TB, o web.Options) *httptest.Server {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil)
	o.Addr = ts.Listener.Addr().String()
	if o.Backend.Plan == nil && o.Backend.Doctor == nil && o.Backend.Trace == nil {
		empty := t.TempDir()
		o.Backend = cli.WebBackend(func(k string) string {
			if k == "CANIFINETUNE_TOOL_PATH" || k == "PATH" {
				return empty
			}
			return ""
		})
	}
	s, err := web.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = s.Handler()
	ts.Start()
	t.Cleanup(ts.Close)
	return ts
}

func get(t *testing.T, ts *httptest.Server, method, path, ctype string, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

type problem struct {
	Error string `json:"error"`
	Field string `json:"field"`
	Hint  string `json:"hint"`
}

// cliRun runs the command line as a user would, for the bytes to compare.
func cliRun(t *testing.T, args ...string) ([]byte, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := cli.Main(args, cli.Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
	return out.Bytes(), code
}

const planQuery = "model=Qwen/Qwen2.5-7B&gpu=rtx-4090&dataset-tokens=1e8"

// TestPlanAPI: /api/plan answers with plan --json's bytes, and refuses
// what the command refuses, in its words, and what the page must not do
// (detect GPUs, read the Hub or a local path).
func TestPlanAPI(t *testing.T) {
	ts := newServer(t, web.Options{})
	status, body := get(t, ts, "GET", "/api/plan?"+planQuery, "", nil)
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	want, code := cliRun(t, "plan", "Qwen/Qwen2.5-7B", "--gpu", "rtx-4090", "--dataset-tokens", "1e8", "--json")
	if code != 0 {
		t.Fatalf("plan exit %d", code)
	}
	if diff := cmp.Diff(string(want), string(body)); diff != "" {
		t.Errorf("/api/plan differs from plan --json (-cli +api):\n%s", diff)
	}
	status, post := get(t, ts, "POST", "/api/plan", "application/json", strings.NewReader(`{"model":"Qwen/Qwen2.5-7B","gpu":"rtx-4090","dataset-tokens":1e8}`))
	if status != 200 || !bytes.Equal(post, body) {
		t.Errorf("POST: status %d, same bytes as GET: %v", status, bytes.Equal(post, body))
	}
	// A plan that cannot fit is an answer, not an error: the document says why.
	status, body = get(t, ts, "GET", "/api/plan?model=meta-llama/Llama-3.1-70B&method=full&gpu=rtx-4090&dataset-tokens=1e8", "", nil)
	var np struct {
		NoPlan *struct{ Binding string } `json:"no_plan"`
	}
	if err := json.Unmarshal(body, &np); status != 200 || err != nil || np.NoPlan == nil || np.NoPlan.Binding == "" {
		t.Errorf("no plan: status %d, %v, %s", status, err, body[:min(len(body), 300)])
	}

	// An encoder-decoder's target length reaches the search as --target-len.
	status, body = get(t, ts, "GET", "/api/plan?model=google-t5/t5-small&gpu=rtx-4090&dataset-tokens=1e8&target-len=64", "", nil)
	want, code = cliRun(t, "plan", "google-t5/t5-small", "--gpu", "rtx-4090", "--dataset-tokens", "1e8", "--target-len", "64", "--json")
	if status != 200 || code != 0 {
		t.Fatalf("target-len: status %d, plan exit %d: %s", status, code, body)
	}
	if diff := cmp.Diff(string(want), string(body)); diff != "" {
		t.Errorf("/api/plan with target-len differs from plan --target-len --json (-cli +api):\n%s", diff)
	}

	// A kept dataset's lengths reach the search as --seq-len-dataset, and
	// the plans' check-it commands keep them.
	status, body = get(t, ts, "GET", "/api/plan?"+planQuery+"&seq-len-dataset=alpaca-cleaned", "", nil)
	want, code = cliRun(t, "plan", "Qwen/Qwen2.5-7B", "--gpu", "rtx-4090", "--dataset-tokens", "1e8", "--seq-len-dataset", "alpaca-cleaned", "--json")
	if status != 200 || code != 0 {
		t.Fatalf("seq-len-dataset: status %d, plan exit %d: %s", status, code, body)
	}
	if diff := cmp.Diff(string(want), string(body)); diff != "" {
		t.Errorf("/api/plan with seq-len-dataset differs from plan --seq-len-dataset --json (-cli +api):\n%s", diff)
	}
	if !strings.Contains(string(body), "--seq-len-dataset alpaca-cleaned") {
		t.Errorf("/api/plan with seq-len-dataset: no plan command keeps --seq-len-dataset")
	}

	for _, tc := range []struct {
		name, method, path, ctype, body string
		status                          int
		field, msg                      string
	}{
		{"enum", "GET", "/api/plan?" + planQuery + "&method=xx", "", "", 400, "method", `--method must be one of "full","lora","qlora" but got "xx"`},
		{"number", "GET", "/api/plan?" + planQuery + "&seq-len=abc", "", "", 400, "seq-len", `--seq-len: expected an integer, got "abc"`},
		{"no dataset", "GET", "/api/plan?model=Qwen/Qwen2.5-7B&gpu=rtx-4090", "", "", 400, "", "plan needs the dataset's size"},
		{"no gpu", "GET", "/api/plan?model=Qwen/Qwen2.5-7B&dataset-tokens=1e8", "", "", 400, "gpu", "give gpu, gpus or gpu-vram-gb"},
		{"gpu auto", "GET", "/api/plan?model=Qwen/Qwen2.5-7B&gpu=auto&dataset-tokens=1e8", "", "", 400, "gpu", "detects this machine's GPUs"},
		{"gpu indices", "GET", "/api/plan?model=Qwen/Qwen2.5-7B&gpus=0,1&dataset-tokens=1e8", "", "", 400, "gpus", "by index"},
		{"hub model", "GET", "/api/plan?model=someone/not-in-the-catalog&gpu=rtx-4090&dataset-tokens=1e8", "", "", 404, "model", ""},
		{"local path", "GET", "/api/plan?model=./models/x&gpu=rtx-4090&dataset-tokens=1e8", "", "", 404, "model", ""},
		{"flag injection", "GET", "/api/plan?" + planQuery + "&epochs=1+--hub", "", "", 400, "epochs", `--epochs: expected a number, got "1 --hub"`},
		{"unknown", "GET", "/api/plan?" + planQuery + "&estimator=x", "", "", 400, "estimator", "unknown parameter"},
		{"repeated", "GET", "/api/plan?" + planQuery + "&gpu=h100", "", "", 400, "gpu", "given 2 times"},
		{"content type", "POST", "/api/plan", "text/plain", "model=x", 415, "", "Content-Type"},
		{"bad JSON", "POST", "/api/plan", "application/json", "{", 400, "", "request body"},
		{"body limit", "POST", "/api/plan", "application/json", `{"model":"` + strings.Repeat("a", web.MaxBodyBytes) + `"}`, 413, "", "over 64 KiB"},
		{"method", "PUT", "/api/plan", "application/json", "{}", 405, "", "not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, b := get(t, ts, tc.method, tc.path, tc.ctype, strings.NewReader(tc.body))
			var p problem
			if err := json.Unmarshal(b, &p); err != nil {
				t.Fatalf("status %d, body %s: %v", status, b, err)
			}
			if status != tc.status || p.Field != tc.field || !strings.Contains(p.Error, tc.msg) {
				t.Errorf("status %d field %q error %q; want %d %q containing %q", status, p.Field, p.Error, tc.status, tc.field, tc.msg)
			}
		})
	}
}

// TestPlanPage: the plan view renders the ranked plans and keeps its
// configuration in the URL; a refused request shows the message.
func TestPlanPage(t *testing.T) {
	ts := newServer(t, web.Options{})
	status, b := get(t, ts, "GET", "/plan?"+planQuery, "", nil)
	page := string(b)
	if status != 200 || strings.Count(page, `<tr class="plan fit-yes">`) == 0 {
		t.Fatalf("status %d; plan rows %d", status, strings.Count(page, `<tr class="plan`))
	}
	for _, want := range []string{`href="/plan?dataset-tokens=1e8&amp;gpu=rtx-4090&amp;model=Qwen%2FQwen2.5-7B"`, `download="plan.json"`, "canifinetune estimate Qwen/Qwen2.5-7B", `<option value="alpaca-cleaned"`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	status, b = get(t, ts, "GET", "/plan?model=Qwen/Qwen2.5-7B&gpu=rtx-4090", "", nil)
	if status != 400 || !strings.Contains(string(b), "plan needs the dataset&#39;s size") {
		t.Errorf("bad request: status %d", status)
	}
	if status, _ := get(t, ts, "GET", "/plan", "", nil); status != 200 {
		t.Errorf("empty form: status %d", status)
	}
}

// TestDoctorAPI: doctor --json's document with the GPUs probed (none here:
// no nvidia-smi on the tool path) and no Python probe; probe failures are
// gateway errors.
func TestDoctorAPI(t *testing.T) {
	ts := newServer(t, web.Options{})
	status, b := get(t, ts, "GET", "/api/doctor", "", nil)
	var doc struct {
		Schema string          `json:"schema"`
		GPUs   []any           `json:"gpus"`
		Python json.RawMessage `json:"python"`
		Find   []struct{ Code string }
	}
	doc.Find = nil
	if err := json.Unmarshal(b, &doc); status != 200 || err != nil {
		t.Fatalf("status %d: %v %s", status, err, b)
	}
	if doc.Schema != "canifinetune.doctor/v1" || doc.GPUs == nil || len(doc.GPUs) != 0 || string(doc.Python) != "null" {
		t.Errorf("doc %+v", doc)
	}
	if !strings.Contains(string(b), `"code": "no-gpu"`) {
		t.Errorf("no no-gpu finding: %s", b)
	}
	for _, tc := range []struct {
		method, path string
		status       int
	}{{"POST", "/api/doctor", 405}, {"GET", "/api/doctor?x=1", 400}} {
		if status, _ := get(t, ts, tc.method, tc.path, "application/json", strings.NewReader("{}")); status != tc.status {
			t.Errorf("%s %s: status %d, want %d", tc.method, tc.path, status, tc.status)
		}
	}
	if status, b := get(t, ts, "GET", "/doctor", "", nil); status != 200 || !strings.Contains(string(b), "No GPU found on this machine.") {
		t.Errorf("/doctor: status %d", status)
	}

	fake := func(err error) web.Backend {
		return web.Backend{Doctor: func(context.Context) ([]byte, error) { return nil, err }}
	}
	for _, tc := range []struct {
		err    error
		status int
	}{{fmt.Errorf("nvidia-smi: %w", probe.ErrProbeTimeout), 504}, {errors.New("Driver/library version mismatch"), 502}} {
		ts := newServer(t, web.Options{Backend: fake(tc.err)})
		status, b := get(t, ts, "GET", "/api/doctor", "", nil)
		if status != tc.status || !strings.Contains(string(b), tc.err.Error()) {
			t.Errorf("%v: status %d %s", tc.err, status, b)
		}
		if status, _ := get(t, ts, "GET", "/api/plan?"+planQuery, "", nil); status != 501 {
			t.Errorf("no plan backend: status %d, want 501", status)
		}
	}
}

// upload is a multipart body with fields in order; a value of the form
// "@path" is that file.
func upload(t *testing.T, fields ...[2]string) (string, *bytes.Buffer) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for _, f := range fields {
		if p, ok := strings.CutPrefix(f[1], "@"); ok {
			w, err := mw.CreateFormFile(f[0], filepath.Base(p))
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			w.Write(data)
			continue
		}
		mw.WriteField(f[0], f[1])
	}
	mw.Close()
	return mw.FormDataContentType(), &b
}

var traceFiles, _ = filepath.Glob("../trace/testdata/*.json.gz")

// TestTraceAPI: an uploaded trace gets trace --json's document (the same
// analysis, the upload's file name as its source), and bad uploads are
// refused by name, the size limit included.
func TestTraceAPI(t *testing.T) {
	if len(traceFiles) == 0 {
		t.Fatal("no traces in ../trace/testdata")
	}
	ts := newServer(t, web.Options{})
	for _, f := range traceFiles {
		ct, body := upload(t, [2]string{"trace", "@" + f})
		status, got := get(t, ts, "POST", "/api/trace?what-if=attention=1.5x&what-if=gemm=2", ct, body)
		if status != 200 {
			t.Fatalf("%s: status %d %s", f, status, got)
		}
		want, code := cliRun(t, "trace", "--json", "--what-if", "attention=1.5x", "--what-if", "gemm=2", f)
		if code != 0 {
			t.Fatalf("trace exit %d", code)
		}
		want = bytes.Replace(want, []byte(`"source": "`+f+`"`), []byte(`"source": "`+filepath.Base(f)+`"`), 1)
		if diff := cmp.Diff(string(want), string(got)); diff != "" {
			t.Errorf("%s: /api/trace differs from trace --json (-cli +api):\n%s", f, diff)
		}
	}

	small := newServer(t, web.Options{MaxTraceBytes: 64 << 10})
	garbage := filepath.Join(t.TempDir(), "notes.json")
	os.WriteFile(garbage, []byte("hello"), 0o644)
	for _, tc := range []struct {
		name   string
		ts     *httptest.Server
		query  string
		fields [][2]string
		ctype  string
		status int
		msg    string
	}{
		{"not JSON", ts, "", [][2]string{{"trace", "@" + garbage}}, "", 400, "read trace notes.json: not a Chrome trace JSON"},
		{"no file", ts, "", [][2]string{{"speedup", "2"}}, "", 400, `no file in field "trace"`},
		{"unknown field", ts, "", [][2]string{{"x", "1"}, {"trace", "@" + garbage}}, "", 400, `unknown upload field "x"`},
		{"bad what-if", ts, "?what-if=attention", [][2]string{{"trace", "@" + traceFiles[0]}}, "", 400, "want CATEGORY=SPEEDUP"},
		{"unknown parameter", ts, "?top=3", [][2]string{{"trace", "@" + traceFiles[0]}}, "", 400, "unknown parameter"},
		{"not multipart", ts, "", nil, "application/json", 415, "multipart/form-data"},
		{"over the limit", small, "", [][2]string{{"trace", "@" + traceFiles[0]}}, "", 413, "trace upload over 64 KiB, this server's limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct, body := upload(t, tc.fields...)
			if tc.ctype != "" {
				ct = tc.ctype
			}
			status, b := get(t, tc.ts, "POST", "/api/trace"+tc.query, ct, body)
			var p problem
			if err := json.Unmarshal(b, &p); err != nil || status != tc.status || !strings.Contains(p.Error, tc.msg) {
				t.Errorf("status %d %s (%v); want %d containing %q", status, b, err, tc.status, tc.msg)
			}
		})
	}
	if status, _ := get(t, ts, "GET", "/api/trace", "", nil); status != 405 {
		t.Errorf("GET: status %d, want 405", status)
	}
}

// TestTracePage: the trace view draws the categories and steps, lists the
// flags, and has the what-if rows of every speed-up, the chosen one shown.
func TestTracePage(t *testing.T) {
	ts := newServer(t, web.Options{})
	f := "../trace/testdata/hta_ns_resolution_rank0_5steps.json.gz"
	ct, body := upload(t, [2]string{"speedup", "3"}, [2]string{"trace", "@" + f})
	status, b := get(t, ts, "POST", "/trace", ct, body)
	page := string(b)
	if status != 200 {
		t.Fatalf("status %d", status)
	}
	var rep struct {
		Devices []struct {
			Categories []struct {
				Name string
				Ops  int
			}
			Steps  struct{ Steps []any }
			Gaps   struct{ Count int }
			Labels []struct {
				Rows []struct {
					ExclusiveNS int64 `json:"exclusive_ns"`
				}
			}
		}
	}
	out, _ := cliRun(t, "trace", "--json", f)
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	cats, steps, labels, gaps := 0, 0, 0, 0
	for _, d := range rep.Devices {
		gaps += d.Gaps.Count
		for _, lt := range d.Labels {
			n := 0
			for _, r := range lt.Rows {
				if r.ExclusiveNS > 0 {
					n++
				}
			}
			labels += min(n, 13) // 12 bars and one for the rest
		}
		for _, c := range d.Categories {
			if c.Ops > 0 {
				cats++
			}
		}
		steps += len(d.Steps.Steps)
	}
	histGaps := 0
	for _, m := range regexp.MustCompile(`<text class="count"[^>]*>(\d+)</text>`).FindAllStringSubmatch(page, -1) {
		n, _ := strconv.Atoi(m[1])
		histGaps += n
	}
	for _, c := range []struct {
		what      string
		got, want int
	}{
		{"category bars", strings.Count(page, "<g data-category="), cats},
		{"step bars", strings.Count(page, "<g data-step="), steps},
		{"what-if rows showing 3×", strings.Count(page, `<output>3×</output>`), strings.Count(page, `<tr data-category=`)},
		{"label bars", strings.Count(page, "<g data-label="), labels},
		{"gaps in the histogram", histGaps, gaps},
	} {
		if c.got != c.want || c.want == 0 {
			t.Errorf("%s: %d, want %d (> 0)", c.what, c.got, c.want)
		}
	}
	if !strings.Contains(page, `<h2 id="source">hta_ns_resolution_rank0_5steps.json.gz</h2>`) {
		t.Error("no source")
	}
	// A slider's last position (10×) shows what trace --what-if shows.
	out, _ = cliRun(t, "trace", "--json", "--what-if", "gemm=10x", f)
	var wi struct {
		WhatIf []struct {
			Device  int   `json:"device"`
			SavedNS int64 `json:"saved_ns"`
		} `json:"what_if"`
	}
	if err := json.Unmarshal(out, &wi); err != nil || len(wi.WhatIf) == 0 {
		t.Fatalf("trace --what-if: %v %s", err, out)
	}
	m := regexp.MustCompile(`<tr data-category="gemm">.*?<td class="num" data-v="([^"]*)">`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no gemm what-if row")
	}
	saved := strings.Split(html.UnescapeString(m[1]), "|")
	if want := report.Duration(wi.WhatIf[0].SavedNS); len(saved) != 6 || saved[5] != want {
		t.Errorf("gemm at 10×: the slider shows %q, trace --what-if %q", saved, want)
	}
	ct, body = upload(t, [2]string{"speedup", "7"}, [2]string{"trace", "@" + f})
	if status, _ := get(t, ts, "POST", "/trace", ct, body); status != 400 {
		t.Errorf("speedup 7: status %d, want 400", status)
	}
	if status, b := get(t, ts, "GET", "/trace", "", nil); status != 200 || !strings.Contains(string(b), `enctype="multipart/form-data"`) {
		t.Errorf("GET /trace: status %d", status)
	}
}
