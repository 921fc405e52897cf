package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/canifinetune/canifinetune/internal/hub"
	"github.com/canifinetune/canifinetune/modelsource"
	"github.com/canifinetune/canifinetune/web"
)

// ServeCmd is `canifinetune serve`.
type ServeCmd struct {
	Addr        string `default:"127.0.0.1:0" help:"Address to listen on (host:port; port 0 picks a free one). Loopback only unless --allow-remote."`
	Open        bool   `help:"Open the page in the default browser."`
	AllowRemote bool   `name:"allow-remote" help:"Allow an address other machines can reach (and any Host header). The page has no authentication: anyone who reaches it can use it."`
	Offline     bool   `help:"Read Hub models from the Hugging Face cache only; never the network (also HF_HUB_OFFLINE=1)."`
	NoHub       bool   `name:"no-hub" help:"Serve the embedded catalog only: no Hub, no Hugging Face cache."`

	// browse opens a URL in the user's browser; tests replace it.
	browse func(url string) error `kong:"-"`
}

// Help implements kong's HelpProvider.
func (c *ServeCmd) Help() string {
	return `Serves the calculator as a local web page, and a JSON API over the same
library calls as the command line:

  /                 the calculator: the configuration lives in the URL query,
                    so a link reproduces the view; works without JavaScript
  /api/estimate     GET with the page's query, or POST the same parameters as
                    a JSON object: the document of 'estimate --json'
  /api/models       the document of 'models --json'
  /api/gpus         the document of 'gpus --json'
  /api/search       ?q=TEXT: model ids from the catalog, and from the Hub
                    (online) or the Hugging Face cache (offline)
  /config           upload a local config.json (form field "config", up to
  /api/config       1 MiB): the page shows its estimate; the API answers the
                    model name to estimate it by (config:HASH)
  /plan             the ranked plans of 'plan' for a configuration in the
                    query (a catalog model, GPUs from the table)
  /api/plan         GET with that query, or POST it as JSON: the document of
                    'plan --json'
  /doctor           this machine's GPUs, free against total, as doctor reads
  /api/doctor       them (nvidia-smi within 5 s; the Python stack is not
                    probed): the document of 'doctor --json'
  /trace            upload a Kineto trace: category, label and step bars,
                    the idle gaps by length and cause, reliability flags
                    and a what-if slider per category
  /api/trace        POST a trace as multipart/form-data in field "trace"
                    (what-if=CATEGORY=Sx in the query, repeatable): the
                    document of 'trace --json'

The parameters are the estimate command's flags without their dashes
(model, method, rank, targets, seq-len, seq-len-dataset, target-len, batch,
grad-accum, grad-ckpt, attn, fused-ce, optimizer, stack, frees-logits (true
or false), precision, quant, gpu, gpu-vram-gb, available-vram-gb, estimator;
frees-logits is for /api/estimate and the page only). Errors are JSON {"error", "field", "hint"} in
the command line's words: 400 bad input, 403 a gated or private Hub model,
404 a model not found (offline: not cached), 405 wrong method, 413 a body
over 64 KiB (a trace over 1 GiB, a config over 1 MiB), 502 when the Hub or
nvidia-smi fails, 504 when nvidia-smi hangs.

A model id the catalog lacks (org/name) is read from the Hub as 'estimate
org/name' reads it (config.json and safetensors headers, never the weights),
into the Hugging Face cache; offline (--offline, HF_HUB_OFFLINE) from the
cache only; with --no-hub not at all. The Hugging Face token (HF_TOKEN) is
used for those reads and never sent to the page; with --allow-remote it is
not used, so visitors cannot read gated models with it. The search is
anonymous. The page reads no local file a request names; the only program
it runs is nvidia-smi (rocm-smi), for /doctor. Uploaded traces are streamed
through the analysis and not stored; uploaded configs are kept in memory. It listens on loopback and
answers only requests whose Host is localhost, 127.0.0.1 or [::1] with its
port (a guard against DNS rebinding); cross-site POSTs are refused.

Examples:
  canifinetune serve
  canifinetune serve --addr 127.0.0.1:8080 --open
  curl 'http://127.0.0.1:8080/api/estimate?model=Qwen/Qwen2.5-7B&method=qlora&gpu=rtx-4090'
  curl -F trace=@trace.json.gz 'http://127.0.0.1:8080/api/trace?what-if=attention=2x'

Prints the URL it listens on and serves until interrupted (Ctrl-C).
Exit codes: 0 stopped by a signal, 1 error, 2 usage.`
}

// Run implements the command.
func (c *ServeCmd) Run(env *Env) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return c.serve(ctx, env)
}

// serve listens, prints the URL and serves until ctx is done.
func (c *ServeCmd) serve(ctx context.Context, env *Env) error {
	host, _, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return usageErrorf("--addr 127.0.0.1:8080", "--addr %q: %v", c.Addr, err)
	}
	loopback := isLoopbackHost(host)
	if !loopback && !c.AllowRemote {
		return usageErrorf("--addr 127.0.0.1:8080, or add --allow-remote to mean it", "--addr %s is not a loopback address: other machines could reach the page, which has no authentication", c.Addr)
	}
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.Addr, err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	getenv := env.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	o := web.Options{Addr: addr, AllowRemote: c.AllowRemote, Backend: WebBackend(getenv)}
	if !c.NoHub {
		// A broken Hugging Face environment costs the page its Hub, not
		// its catalog: say so and serve.
		h, err := serveHub(env, getenv, c.Offline, c.AllowRemote)
		if err != nil {
			fmt.Fprintf(env.Stderr, "canifinetune: warning: serving the catalog only, no Hub: %v (fix HF_ENDPOINT, HF_HOME or HF_TOKEN_PATH)\n", err)
		} else {
			o.Hub, o.Offline = h, c.Offline || envOffline(getenv)
		}
	}
	s, err := web.New(o)
	if err != nil {
		return err
	}
	if !loopback {
		fmt.Fprintf(env.Stderr, "canifinetune: warning: serving on %s, which other machines may reach; the page has no authentication and any Host header is answered (--allow-remote)\n", addr)
	}
	url := pageURL(addr)
	fmt.Fprintf(env.Stdout, "canifinetune: serving on %s\n", url)
	if c.Open {
		browse := c.browse
		if browse == nil {
			browse = openBrowser
		}
		if err := browse(url); err != nil {
			fmt.Fprintf(env.Stderr, "canifinetune: warning: could not open a browser (%v): open %s yourself\n", err, url)
		}
	}
	srv := web.NewHTTPServer(s.Handler())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil {
		return err
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// serveHub is the page's Hub: the environment's client (HF_ENDPOINT,
// HF_HOME, HF_HUB_OFFLINE, the token), or a test's fake through env.Hub.
// Served to other machines (--allow-remote) it reads anonymously: the
// owner's token must not open gated models to whoever reaches the page.
func serveHub(env *Env, getenv func(string) string, offline, remote bool) (web.Hub, error) {
	var src modelsource.Source
	var err error
	if env.Hub != nil {
		src, err = env.Hub(hubOptions{Offline: offline})
	} else {
		src, err = newHubClient(getenv, hubOptions{Offline: offline})
	}
	if err != nil {
		return nil, err
	}
	h, ok := src.(web.Hub)
	if !ok {
		return nil, fmt.Errorf("the model source %T cannot search", src)
	}
	if c, ok := h.(*hub.Client); ok && remote {
		c.Token = ""
	}
	return h, nil
}

// isLoopbackHost: localhost or a loopback IP; an empty host (":8080") is
// every interface.
func isLoopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// pageURL is the URL to print for a listener's address: the page answers
// loopback names, so a wildcard address is shown as 127.0.0.1.
func pageURL(addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}

// openBrowser starts the platform's URL opener and does not wait for it.
func openBrowser(url string) error {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", url)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", url)
	default:
		cmd = exec.Command("xdg-open", url)
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go cmd.Wait()
	return nil
}
