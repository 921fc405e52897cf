package web

import (
	"bytes"
	"encoding/json"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/canifinetune/canifinetune/catalog"
	"github.com/canifinetune/canifinetune/gpu"
	"github.com/canifinetune/canifinetune/internal/report"
)

var (
	testSrvOnce sync.Once
	testSrv     *httptest.Server
)

// server is one test server for the package (scoring the cohort at start-up
// is the expensive part), with the Host check on: httptest's URL is
// 127.0.0.1:port, which the check accepts.
func server(t testing.TB) *httptest.Server {
	t.Helper()
	testSrvOnce.Do(func() {
		ts := httptest.NewUnstartedServer(nil)
		s, err := New(Options{Addr: ts.Listener.Addr().String()})
		if err != nil {
			panic(err)
		}
		ts.Config.Handler = s.Handler()
		ts.Start()
		testSrv = ts
	})
	return testSrv
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func do(t testing.TB, method, path string, body io.Reader, header map[string]string) response {
	t.Helper()
	ts := server(t)
	req, err := http.NewRequest(method, ts.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
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
	return response{resp.StatusCode, resp.Header, b}
}

func problemOf(t *testing.T, b []byte) Problem {
	t.Helper()
	var p Problem
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("error body %q: %v", b, err)
	}
	return p
}

const good = "/api/estimate?model=Qwen/Qwen2.5-7B&method=qlora&gpu=rtx-4090&seq-len=4096"

// TestAPIRoutes: every route with good and bad input, its status and, for an
// error, the field and the message (the CLI's words; the CLI package checks
// they equal what the command prints).
func TestAPIRoutes(t *testing.T) {
	json := map[string]string{"Content-Type": "application/json"}
	tests := []struct {
		name, method, path, body string
		header                   map[string]string
		status                   int
		field, msg               string
	}{
		{"estimate GET", "GET", good, "", nil, 200, "", ""},
		{"estimate POST", "POST", "/api/estimate", `{"model":"Qwen/Qwen2.5-7B","method":"qlora","gpu":"rtx-4090","seq-len":4096}`, json, 200, "", ""},
		{"estimate POST targets list", "POST", "/api/estimate", `{"model":"Qwen/Qwen2.5-7B","targets":["q_proj","v_proj"]}`, json, 200, "", ""},
		{"seq-len out of range", "GET", "/api/estimate?model=Qwen/Qwen2.5-7B&seq-len=-5", "", nil, 400, "seq-len", "--seq-len must be an integer in 1..16777216, got -5"},
		{"seq-len not a number", "GET", "/api/estimate?model=Qwen/Qwen2.5-7B&seq-len=abc", "", nil, 400, "seq-len", `--seq-len: expected an integer, got "abc"`},
		{"target-len on a decoder-only model", "GET", "/api/estimate?model=Qwen/Qwen2.5-7B&target-len=128", "", nil, 400, "target-len", ""},
		{"target-len not a number", "GET", "/api/estimate?model=google-t5/t5-small&target-len=x", "", nil, 400, "target-len", `--target-len: expected an integer, got "x"`},
		{"rank 0", "GET", "/api/estimate?model=Qwen/Qwen2.5-7B&rank=0", "", nil, 400, "rank", "--rank must be an integer in 1..1048576, got 0"},
		{"unknown method", "GET", "/api/estimate?model=Qwen/Qwen2.5-7B&method=bogus", "", nil, 400, "method", `--method must be one of "full","lora","qlora" but got "bogus"`},
		{"unknown GPU", "GET", "/api/estimate?model=Qwen/Qwen2.5-7B&gpu=nosuchcard", "", nil, 400, "gpu", ""},
		{"gpu and vram", "GET", "/api/estimate?model=Qwen/Qwen2.5-7B&gpu=rtx-4090&gpu-vram-gb=24", "", nil, 400, "gpu", "give --gpu or --gpu-vram-gb, not both"},
		{"unknown parameter", "GET", "/api/estimate?model=Qwen/Qwen2.5-7B&seqlen=5", "", nil, 400, "seqlen", ""},
		{"no model", "GET", "/api/estimate", "", nil, 400, "model", "no model given"},
		{"local path refused", "GET", "/api/estimate?model=/etc", "", nil, 404, "model", `model not in the embedded catalog: "/etc"`},
		{"unknown model", "GET", "/api/estimate?model=nope/nothing", "", nil, 404, "model", `model not in the embedded catalog: "nope/nothing"`},
		{"LoRA flag with full", "GET", "/api/estimate?model=Qwen/Qwen2.5-7B&method=full&targets=all-linear", "", nil, 400, "targets", ""},
		{"bad JSON", "POST", "/api/estimate", `{"model":`, json, 400, "", ""},
		{"JSON object value", "POST", "/api/estimate", `{"model":{"a":1}}`, json, 400, "model", ""},
		{"not JSON", "POST", "/api/estimate", `model=x`, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, "", ""},
		{"body too large", "POST", "/api/estimate", `{"model":"` + strings.Repeat("a", MaxBodyBytes) + `"}`, json, 413, "", ""},
		{"estimate PUT", "PUT", "/api/estimate", "{}", json, 405, "", ""},
		{"models", "GET", "/api/models", "", nil, 200, "", ""},
		{"models POST", "POST", "/api/models", "{}", json, 405, "", ""},
		{"gpus", "GET", "/api/gpus", "", nil, 200, "", ""},
		{"gpus DELETE", "DELETE", "/api/gpus", "", nil, 405, "", ""},
		{"page POST", "POST", "/", "", nil, 405, "", ""},
		{"static", "GET", "/static/style.css", "", nil, 200, "", ""},
		{"no such path", "GET", "/etc/passwd", "", nil, 404, "", ""},
		{"static traversal", "GET", "/static/../server.go", "", nil, 404, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, tt.method, tt.path, strings.NewReader(tt.body), tt.header)
			if r.status != tt.status {
				t.Fatalf("status %d, want %d; body %s", r.status, tt.status, r.body)
			}
			if tt.status == 405 && r.header.Get("Allow") == "" {
				t.Errorf("405 without an Allow header")
			}
			if tt.status < 400 || tt.status == 404 && tt.field == "" {
				return
			}
			p := problemOf(t, r.body)
			if p.Field != tt.field {
				t.Errorf("field %q, want %q (%s)", p.Field, tt.field, p.Message)
			}
			if tt.msg != "" && p.Message != tt.msg {
				t.Errorf("message %q, want %q", p.Message, tt.msg)
			}
			if p.Message == "" {
				t.Error("no message")
			}
		})
	}
}

// TestAPIValueHints: a refused value that names two options gets the
// CLI's hint as the problem's hint (--precision bf16 is two precisions),
// and one that does not keeps the generic hint.
func TestAPIValueHints(t *testing.T) {
	for _, c := range []struct{ query, field, hint string }{
		{"precision=bf16", "precision", "bf16 is two precisions here"},
		{"quant=4bit", "quant", "default bnb_4bit_quant_type is fp4"},
		{"method=bogus", "method", "canifinetune serve --help"},
	} {
		r := do(t, "GET", "/api/estimate?model=Qwen/Qwen2.5-7B&"+c.query, nil, nil)
		if r.status != 400 {
			t.Fatalf("%s: status %d, want 400; body %s", c.query, r.status, r.body)
		}
		p := problemOf(t, r.body)
		if p.Field != c.field || !strings.Contains(p.Hint, c.hint) || !strings.Contains(p.Message, "must be one of") {
			t.Errorf("%s: field %q, message %q, hint %q; want field %q and a hint with %q", c.query, p.Field, p.Message, p.Hint, c.field, c.hint)
		}
	}
}

// TestAPIDocuments: the models and gpus routes serve the documents the CLI
// prints, and GET and POST of the same parameters give the same estimate.
func TestAPIDocuments(t *testing.T) {
	var models []report.ModelRow
	if err := json.Unmarshal(do(t, "GET", "/api/models", nil, nil).body, &models); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(report.NewModels(catalog.All()), models); diff != "" {
		t.Errorf("/api/models (-want +got):\n%s", diff)
	}
	var gpus report.GPUs
	if err := json.Unmarshal(do(t, "GET", "/api/gpus", nil, nil).body, &gpus); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(report.NewGPUs(gpu.Cards()), gpus); diff != "" {
		t.Errorf("/api/gpus (-want +got):\n%s", diff)
	}
	get := do(t, "GET", good, nil, nil).body
	post := do(t, "POST", "/api/estimate", strings.NewReader(`{"model":"Qwen/Qwen2.5-7B","method":"qlora","gpu":"rtx-4090","seq-len":4096}`), nil).body
	if !bytes.Equal(get, post) {
		t.Errorf("GET and POST of the same parameters differ:\n%s\n%s", get, post)
	}
	var e report.Estimate
	if err := json.Unmarshal(get, &e); err != nil {
		t.Fatal(err)
	}
	if e.Config.Method != "qlora" || e.Config.SeqLen != 4096 || e.GPU == nil || e.GPU.Name != "NVIDIA GeForce RTX 4090" || e.Verdict.Fit == "" {
		t.Errorf("estimate does not follow the query: config %+v gpu %+v verdict %+v", e.Config, e.GPU, e.Verdict)
	}
}

// TestHostCheck: a page reached through another name (DNS rebinding) or
// another port is refused; the loopback names of its own port are served.
func TestHostCheck(t *testing.T) {
	port := server(t).Listener.Addr().(*net.TCPAddr).Port
	p := strconv.Itoa(port)
	for _, tt := range []struct {
		host   string
		status int
	}{
		{"127.0.0.1:" + p, 200}, {"localhost:" + p, 200}, {"LOCALHOST:" + p, 200}, {"[::1]:" + p, 200},
		{"evil.example:" + p, 403}, {"evil.example", 403}, {"127.0.0.1:1", 403}, {"localhost", 403}, {"127.0.0.1.nip.io:" + p, 403},
	} {
		if r := do(t, "GET", "/api/gpus", nil, map[string]string{"Host": tt.host}); r.status != tt.status {
			t.Errorf("Host %q: status %d, want %d", tt.host, r.status, tt.status)
		}
	}
	// With AllowRemote the server was bound for other machines on purpose.
	s, err := New(Options{Addr: "0.0.0.0:8080", AllowRemote: true})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/api/gpus", nil)
	req.Host = "gpu-box.lan:8080"
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Errorf("AllowRemote: status %d, want 200", rec.Code)
	}
}

// TestOriginCheck: a POST from another site's page is refused; one from the
// page itself, or from a client that is not a browser, is served.
func TestOriginCheck(t *testing.T) {
	u, _ := url.Parse(server(t).URL)
	body := `{"model":"Qwen/Qwen2.5-7B"}`
	for _, tt := range []struct {
		header map[string]string
		status int
	}{
		{map[string]string{"Origin": "http://evil.example"}, 403},
		{map[string]string{"Origin": "null"}, 403},
		{map[string]string{"Origin": "http://" + u.Host + ".evil.example"}, 403},
		{map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{map[string]string{"Origin": "http://" + u.Host}, 200},
		{map[string]string{"Origin": "http://" + u.Host, "Sec-Fetch-Site": "same-origin"}, 200},
		// A form POST under Referrer-Policy: no-referrer: Chromium sends
		// Origin: null, and Sec-Fetch-Site, which a page cannot forge.
		{map[string]string{"Origin": "null", "Sec-Fetch-Site": "same-origin"}, 200},
		{map[string]string{"Origin": "null", "Sec-Fetch-Site": "cross-site"}, 403},
		{map[string]string{}, 200},
	} {
		tt.header["Content-Type"] = "application/json"
		if r := do(t, "POST", "/api/estimate", strings.NewReader(body), tt.header); r.status != tt.status {
			t.Errorf("headers %v: status %d, want %d (%s)", tt.header, r.status, tt.status, r.body)
		}
	}
}

var (
	selectRE   = regexp.MustCompile(`(?s)<select name="([^"]+)">(.*?)</select>`)
	selectedRE = regexp.MustCompile(`<option value="([^"]*)"[^>]*\sselected>`)
	inputRE    = regexp.MustCompile(`<input name="([^"]+)"[^>]*?value="([^"]*)"`)
	rectRE     = regexp.MustCompile(`<rect class="c-[a-z_]+" data-component="([a-z_]+)"`)
)

// formValues reads back what the rendered form has selected and filled in.
func formValues(page string) Params {
	p := Params{}
	for _, m := range selectRE.FindAllStringSubmatch(page, -1) {
		if s := selectedRE.FindStringSubmatch(m[2]); s != nil && s[1] != "" {
			p[m[1]] = s[1]
		}
	}
	for _, m := range inputRE.FindAllStringSubmatch(page, -1) {
		if m[2] != "" {
			p[m[1]] = htmlUnescape(m[2])
		}
	}
	return p
}

func htmlUnescape(s string) string { return html.UnescapeString(s) }

// TestPageRoundTrip: the page rendered for a query has exactly that
// configuration selected, and its share link is the same query.
func TestPageRoundTrip(t *testing.T) {
	for _, q := range []Params{
		{"model": "Qwen/Qwen2.5-7B", "method": "qlora", "gpu": "rtx-4090", "seq-len": "4096", "batch": "2", "grad-accum": "8",
			"grad-ckpt": "unsloth", "attn": "flash_attention_2", "fused-ce": "liger", "optimizer": "adamw_8bit", "rank": "32",
			"targets": "all-linear", "precision": "bf16-mixed", "quant": "nf4", "stack": "unsloth"},
		{"model": "meta-llama/Llama-3.1-8B", "method": "full", "gpu-vram-gb": "80", "available-vram-gb": "70.5", "estimator": "seed000"},
		{"model": "Qwen/Qwen2.5-7B"},
	} {
		r := do(t, "GET", "/?"+q.Query(), nil, nil)
		if r.status != 200 {
			t.Fatalf("%s: status %d\n%s", q.Query(), r.status, r.body)
		}
		page := string(r.body)
		if diff := cmp.Diff(q, formValues(page)); diff != "" {
			t.Errorf("%s: form (-query +page):\n%s", q.Query(), diff)
		}
		share := regexp.MustCompile(`<a id="share" href="/\?([^"]*)"`).FindStringSubmatch(page)
		if share == nil {
			t.Fatalf("%s: no share link", q.Query())
		}
		got, err := url.ParseQuery(htmlUnescape(share[1]))
		if err != nil {
			t.Fatal(err)
		}
		back, _ := ParseQuery(got)
		if diff := cmp.Diff(q, back); diff != "" {
			t.Errorf("share link %s (-query +link):\n%s", share[1], diff)
		}
	}
}

// TestPageResult: the page shows the verdict of the API's estimate and one
// SVG rect per non-zero component, in order, with its source as a tooltip.
func TestPageResult(t *testing.T) {
	var e report.Estimate
	if err := json.Unmarshal(do(t, "GET", good, nil, nil).body, &e); err != nil {
		t.Fatal(err)
	}
	page := string(do(t, "GET", "/?"+strings.TrimPrefix(good, "/api/estimate?"), nil, nil).body)
	if want := `<span id="verdict">` + e.Verdict.Fit + `</span>`; !strings.Contains(page, want) {
		t.Errorf("page lacks the verdict %q", want)
	}
	var want []string
	for _, c := range e.Components {
		if c.Bytes > 0 {
			want = append(want, c.Name)
			if !strings.Contains(html.UnescapeString(page), c.Source) {
				t.Errorf("page lacks the source of %s", c.Name)
			}
		}
	}
	var got []string
	for _, m := range rectRE.FindAllStringSubmatch(page, -1) {
		got = append(got, m[1])
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("bar segments (-components +rects):\n%s", diff)
	}
	for _, s := range []string{"yes ≤ 85 %", "marginal ≤ 97 %", "confidence: <strong>" + e.Confidence.Grade, "measured error of canifinetune", "method qlora"} {
		if !strings.Contains(page, s) {
			t.Errorf("page lacks %q", s)
		}
	}
}

// TestPageEscapes: what a request carries is escaped, never markup.
func TestPageEscapes(t *testing.T) {
	evil := `<script>alert(1)</script>`
	r := do(t, "GET", "/?"+url.Values{"model": {evil}}.Encode(), nil, nil)
	if r.status != 404 {
		t.Errorf("status %d, want 404", r.status)
	}
	page := string(r.body)
	if strings.Contains(page, evil) || strings.Contains(page, "<script>alert") {
		t.Error("the model name reached the page unescaped")
	}
	if !strings.Contains(page, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Error("the page does not show the escaped name")
	}
	if got := r.header.Get("Content-Security-Policy"); !strings.Contains(got, "default-src 'self'") {
		t.Errorf("Content-Security-Policy %q", got)
	}
}

// TestNoToken: a Hugging Face token in the environment never reaches a
// response.
func TestNoToken(t *testing.T) {
	const token = "hf_thisIsNotARealTokenButAMarker"
	t.Setenv("HF_TOKEN", token)
	for _, path := range []string{"/", "/?model=Qwen/Qwen2.5-7B&gpu=rtx-4090", good, "/api/models", "/api/gpus", "/api/estimate?model=nope/x"} {
		if r := do(t, "GET", path, nil, nil); bytes.Contains(r.body, []byte(token)) || bytes.Contains(r.body, []byte("HF_TOKEN")) {
			t.Errorf("%s: the response carries the token", path)
		}
	}
}

// TestHTTPServerTimeouts: the server a command runs has every timeout set.
func TestHTTPServerTimeouts(t *testing.T) {
	s := NewHTTPServer(http.NotFoundHandler())
	if s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 || s.WriteTimeout <= 0 || s.IdleTimeout <= 0 || s.MaxHeaderBytes <= 0 {
		t.Errorf("timeouts %v %v %v %v, header bytes %d", s.ReadHeaderTimeout, s.ReadTimeout, s.WriteTimeout, s.IdleTimeout, s.MaxHeaderBytes)
	}
}

// TestTargetLen: the decoder length of an encoder-decoder model reaches the
// estimate (its config echoes it) and a shorter target lowers the estimate,
// as the CLI's --target-len does.
func TestTargetLen(t *testing.T) {
	est := func(q string) report.Estimate {
		return estimateAt(t, "/api/estimate?model=google-t5/t5-small&method=full&seq-len=1024"+q)
	}
	same, short := est(""), est("&target-len=64")
	if short.Config.TargetLen != 64 {
		t.Errorf("config.target_len = %d, want 64", short.Config.TargetLen)
	}
	if short.TotalBytes >= same.TotalBytes {
		t.Errorf("target 64 of source 1024: %.3f GiB, not below the default target's %.3f GiB", float64(short.TotalBytes)/(1<<30), float64(same.TotalBytes)/(1<<30))
	}
}

// TestAPIFreesLogits: frees-logits is the CLI's --frees-logits. With the
// pytorch stack, freeing the model's output before the backward lowers the
// allocated peak by the 2 B per logit the inline loop holds (Qwen2.5-0.5B,
// 1024 tokens: 2 × 1024 × 151,936 bytes); with another stack it changes
// nothing and warns; a value that is not a boolean is refused by name.
func TestAPIFreesLogits(t *testing.T) {
	const q = "/api/estimate?model=Qwen/Qwen2.5-0.5B&method=lora&seq-len=1024&grad-ckpt=full&precision=bf16-true"
	get := func(extra string) report.Estimate { return estimateAt(t, q+extra) }
	held, freed := get("&stack=pytorch"), get("&stack=pytorch&frees-logits=true")
	if !freed.Config.FreesLogits || held.Config.FreesLogits {
		t.Errorf("config frees_logits: held %v, freed %v", held.Config.FreesLogits, freed.Config.FreesLogits)
	}
	if d := held.Levels.AllocatedBytes - freed.Levels.AllocatedBytes; d != 2*1024*151936 {
		t.Errorf("allocated held − freed = %d bytes, want %d", d, 2*1024*151936)
	}
	stock, ignored := get(""), get("&frees-logits=true")
	if stock.Levels.AllocatedBytes != ignored.Levels.AllocatedBytes || !slices.ContainsFunc(ignored.Warnings, func(w string) bool { return strings.Contains(w, "frees-logits") }) {
		t.Errorf("frees-logits without the pytorch stack: allocated %d vs %d, warnings %q; want equal and a warning", stock.Levels.AllocatedBytes, ignored.Levels.AllocatedBytes, ignored.Warnings)
	}
	r := do(t, "GET", q+"&frees-logits=maybe", nil, nil)
	if p := problemOf(t, r.body); r.status != 400 || p.Field != "frees-logits" {
		t.Errorf("frees-logits=maybe: status %d, problem %+v; want 400 naming frees-logits", r.status, p)
	}
}

// TestAPISeqLenDataset: seq-len-dataset is the CLI's --seq-len-dataset. The
// cleaned Alpaca set's longest sample (1,584 tokens) moves the longest batch
// below a 2048 bound, the config says where the lengths came from, and an
// unknown name is refused by name; the page offers the kept histograms.
func TestAPISeqLenDataset(t *testing.T) {
	const q = "/api/estimate?model=Qwen/Qwen2.5-0.5B&method=lora&seq-len=2048"
	bound, data := estimateAt(t, q), estimateAt(t, q+"&seq-len-dataset=alpaca-cleaned")
	if c := data.Config; c.SeqLen != 1584 || c.SeqLenP50 != 185 || !c.Dynamic || c.LengthsFrom != "dataset alpaca-cleaned" || c.SeqLenBound != 2048 {
		t.Errorf("config %+v: want seq_len 1584, median 185, dynamic padding, lengths from the dataset, bound 2048", c)
	}
	if data.Levels.AllocatedBytes >= bound.Levels.AllocatedBytes {
		t.Errorf("allocated at the dataset's lengths %d, not below the 2048 bound's %d", data.Levels.AllocatedBytes, bound.Levels.AllocatedBytes)
	}
	r := do(t, "GET", q+"&seq-len-dataset=alpaca", nil, nil)
	if p := problemOf(t, r.body); r.status != 400 || p.Field != "seq-len-dataset" || !strings.Contains(p.Message, "alpaca-cleaned") {
		t.Errorf("seq-len-dataset=alpaca: status %d, problem %+v; want 400 naming the field and the kept names", r.status, p)
	}
	page := do(t, "GET", "/?model=Qwen/Qwen2.5-0.5B&seq-len-dataset=alpaca-cleaned", nil, nil)
	if page.status != 200 || !strings.Contains(string(page.body), `<option value="alpaca-cleaned"`) {
		t.Errorf("page: status %d, want 200 with the alpaca-cleaned option", page.status)
	}
}

// estimateAt GETs an /api/estimate URL that must succeed and decodes it.
func estimateAt(t *testing.T, url string) report.Estimate {
	t.Helper()
	r := do(t, "GET", url, nil, nil)
	if r.status != 200 {
		t.Fatalf("%s: status %d: %s", url, r.status, r.body)
	}
	var e report.Estimate
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

// A paged optimizer's states in unified memory are in the API's
// paged_optimizer_gb and on the page; an optimizer that is not paged shows
// neither.
func TestPagedOptimizerShown(t *testing.T) {
	const q = "model=Qwen/Qwen2.5-7B&method=full&seq-len=1024&grad-ckpt=full&precision=bf16-true"
	paged, plain := estimateAt(t, "/api/estimate?"+q+"&optimizer=paged_adamw_8bit"), estimateAt(t, "/api/estimate?"+q)
	if paged.PagedOptimizerGB < 10 || plain.PagedOptimizerGB != 0 {
		t.Errorf("paged_optimizer_gb: paged_adamw_8bit %v, adamw_torch %v; want about 2 B per parameter (14 GiB) and 0", paged.PagedOptimizerGB, plain.PagedOptimizerGB)
	}
	page := string(do(t, "GET", "/?"+q+"&optimizer=paged_adamw_8bit", nil, nil).body)
	if !strings.Contains(page, "paged optimizer states in CUDA unified memory") {
		t.Errorf("the page of a paged_adamw_8bit estimate does not show its paged states")
	}
	if strings.Contains(string(do(t, "GET", "/?"+q, nil, nil).body), "paged optimizer states") {
		t.Errorf("the page of an adamw_torch estimate shows paged states")
	}
}
