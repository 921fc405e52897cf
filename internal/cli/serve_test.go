package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/canifinetune/canifinetune/internal/hub"
	"github.com/canifinetune/canifinetune/web"
)

// TestServeAPIMatchesCLI: for the same configuration the API answers with
// the bytes `estimate --json`, `models --json` and `gpus --json` print, and a
// refused request carries the message the command prints.
func TestServeAPIMatchesCLI(t *testing.T) {
	ts := httptest.NewUnstartedServer(nil)
	s, err := web.New(web.Options{Addr: ts.Listener.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = s.Handler()
	ts.Start()
	defer ts.Close()
	get := func(path string) (int, []byte) {
		resp, err := ts.Client().Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Main(args, Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
		return code, out.String(), errb.String()
	}
	for _, cmd := range []string{"models", "gpus"} {
		_, want, _ := run(cmd, "--json")
		if _, got := get("/api/" + cmd); string(got) != want {
			t.Errorf("/api/%s differs from %s --json", cmd, cmd)
		}
	}
	for _, tt := range []struct {
		model string
		flags []string
	}{
		{"Qwen/Qwen2.5-7B", []string{"--method=qlora", "--gpu=rtx-4090"}},
		{"Qwen/Qwen2.5-7B", []string{"--method=full", "--gpu=a100-80gb", "--seq-len=4096", "--batch=4", "--grad-ckpt=full", "--optimizer=adamw_8bit"}},
		{"meta-llama/Llama-3.1-8B", []string{"--method=lora", "--rank=64", "--targets=all-linear", "--gpu=rtx-4090", "--available-vram-gb=20"}},
		{"Qwen/Qwen2.5-0.5B", []string{"--stack=unsloth", "--gpu-vram-gb=16", "--fused-ce=liger", "--attn=eager", "--precision=fp16-mixed"}},
		{"Qwen/Qwen2.5-7B", []string{"--estimator=seed000", "--gpu=h100", "--grad-accum=4"}},
		{"Qwen/Qwen2.5-7B", []string{"--method=qlora", "--quant=int8", "--gpu=t4"}},
	} {
		q := url.Values{"model": {tt.model}}
		for _, f := range tt.flags {
			k, v, _ := strings.Cut(strings.TrimPrefix(f, "--"), "=")
			q.Set(k, v)
		}
		_, want, stderr := run(append([]string{"estimate", tt.model, "--json"}, tt.flags...)...)
		status, got := get("/api/estimate?" + q.Encode())
		if status != 200 || string(got) != want {
			t.Errorf("%v: API (status %d) differs from the CLI (stderr %q):\n%s\nCLI:\n%s", tt.flags, status, stderr, got, want)
		}
	}
	for _, flags := range [][]string{
		{"--seq-len=-5", "--gpu=rtx-4090"}, {"--seq-len=abc"}, {"--rank=0"}, {"--grad-accum=0"}, {"--method=bogus"},
		{"--optimizer=sgd9"}, {"--gpu=nosuchcard"}, {"--gpu=rtx-4090", "--gpu-vram-gb=24"},
		{"--gpu-vram-gb=NaN"}, {"--gpu=rtx-4090", "--available-vram-gb=30"}, {"--method=full", "--targets=all-linear"},
		{"--rank=100000"}, {"--seq-len=4096", "--batch=100000000"}, {"--estimator=nope"},
	} {
		q := url.Values{"model": {"Qwen/Qwen2.5-7B"}}
		for _, f := range flags {
			k, v, _ := strings.Cut(strings.TrimPrefix(f, "--"), "=")
			q.Set(k, v)
		}
		code, _, stderr := run(append([]string{"estimate", "Qwen/Qwen2.5-7B", "--json"}, flags...)...)
		status, body := get("/api/estimate?" + q.Encode())
		var p web.Problem
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatalf("%v: %s", flags, body)
		}
		first, _, _ := strings.Cut(stderr, "\n")
		if code != ExitUsage || status != 400 || first != "canifinetune: "+p.Message {
			t.Errorf("%v: CLI exit %d %q; API %d %q", flags, code, first, status, p.Message)
		}
	}
}

// syncBuffer is a buffer the server goroutine writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeCommand: serve prints the URL it listens on, answers there,
// opens it with --open, and stops when its context ends.
func TestServeCommand(t *testing.T) {
	var out, errb syncBuffer
	env := &Env{Stdout: &out, Stderr: &errb}
	opened := make(chan string, 1)
	c := &ServeCmd{Addr: "127.0.0.1:0", Open: true, browse: func(u string) error { opened <- u; return nil }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.serve(ctx, env) }()
	var u string
	select {
	case u = <-opened:
	case err := <-done:
		t.Fatalf("serve ended: %v; stderr %s", err, errb.String())
	case <-time.After(30 * time.Second):
		t.Fatal("serve printed no URL")
	}
	line, _ := bufio.NewReader(strings.NewReader(out.String())).ReadString('\n')
	if want := "canifinetune: serving on " + u + "\n"; line != want || !strings.HasPrefix(u, "http://127.0.0.1:") {
		t.Errorf("stdout %q, opened %q", line, u)
	}
	resp, err := http.Get(u + "api/estimate?model=Qwen/Qwen2.5-7B&gpu=rtx-4090")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("status %d", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve after cancel: %v", err)
	}
}

// TestServeAddr: an address other machines reach needs --allow-remote, and
// then comes with a warning.
func TestServeAddr(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main([]string{"serve", "--addr", "0.0.0.0:0"}, Env{Stdout: &out, Stderr: &errb})
	if code != ExitUsage || !strings.Contains(errb.String(), "is not a loopback address") || !strings.Contains(errb.String(), "--allow-remote") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
	if code := Main([]string{"serve", "--addr", "nonsense"}, Env{Stdout: &out, Stderr: &errb}); code != ExitUsage {
		t.Errorf("--addr nonsense: exit %d", code)
	}
	var o2, e2 syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&ServeCmd{Addr: "0.0.0.0:0", AllowRemote: true}).serve(ctx, &Env{Stdout: &o2, Stderr: &e2})
	}()
	for i := 0; i < 300 && !strings.Contains(o2.String(), "serving on"); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(e2.String(), "which other machines may reach") || !strings.Contains(o2.String(), "serving on http://127.0.0.1:") {
		t.Errorf("stdout %q stderr %q", o2.String(), e2.String())
	}
}

// TestServeHub: the page says where models beyond the catalog come from,
// as serve's flags and the Hugging Face environment decide: online, offline
// (--offline or HF_HUB_OFFLINE), off (--no-hub, or an environment without a
// cache, which serve warns about and serves anyway).
func TestServeHub(t *testing.T) {
	home := t.TempDir()
	for _, tc := range []struct {
		name     string
		cmd      ServeCmd
		env      map[string]string
		mode     string
		warnings string
	}{
		{"online", ServeCmd{}, map[string]string{"HOME": home}, "online", ""},
		{"HF_HUB_OFFLINE", ServeCmd{}, map[string]string{"HOME": home, "HF_HUB_OFFLINE": "1"}, "offline", ""},
		{"--offline", ServeCmd{Offline: true}, map[string]string{"HOME": home}, "offline", ""},
		{"--no-hub", ServeCmd{NoHub: true}, map[string]string{"HOME": home}, "off", ""},
		{"no cache", ServeCmd{}, nil, "off", "serving the catalog only, no Hub: cannot find the Hugging Face cache"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb syncBuffer
			env := &Env{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return tc.env[k] }}
			c := tc.cmd
			c.Addr = "127.0.0.1:0"
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.serve(ctx, env) }()
			for i := 0; i < 300 && !strings.Contains(out.String(), "serving on"); i++ {
				time.Sleep(20 * time.Millisecond)
			}
			u := strings.TrimSpace(strings.TrimPrefix(out.String(), "canifinetune: serving on "))
			resp, err := http.Get(u + "api/search?q=")
			if err != nil {
				cancel()
				t.Fatalf("%v (stdout %q)", err, out.String())
			}
			var r struct {
				State struct{ Mode string } `json:"hub_state"`
			}
			json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if r.State.Mode != tc.mode || !strings.Contains(errb.String(), tc.warnings) || (tc.warnings == "" && errb.String() != "") {
				t.Errorf("mode %q, stderr %q; want %q and %q", r.State.Mode, errb.String(), tc.mode, tc.warnings)
			}
		})
	}
}

// TestServeHubRemote: served to other machines, the page's Hub client
// reads anonymously, whatever token the environment holds.
func TestServeHubRemote(t *testing.T) {
	for _, remote := range []bool{false, true} {
		env := &Env{Getenv: func(k string) string {
			return map[string]string{"HOME": t.TempDir(), "HF_TOKEN": "hf_notARealTokenJustAMarker"}[k]
		}}
		h, err := serveHub(env, env.Getenv, false, remote)
		if err != nil {
			t.Fatal(err)
		}
		c, ok := h.(*hub.Client)
		if !ok {
			t.Fatalf("%T", h)
		}
		if got := c.Token != ""; got == remote {
			t.Errorf("remote %v: token kept %v", remote, got)
		}
	}
}
