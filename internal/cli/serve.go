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

	"github.com/canifinetune/canifinetune/web"
)

// ServeCmd is `canifinetune serve`.
type ServeCmd struct {
	Addr        string `default:"127.0.0.1:0" help:"Address to listen on (host:port; port 0 picks a free one). Loopback only unless --allow-remote."`
	Open        bool   `help:"Open the page in the default browser."`
	AllowRemote bool   `name:"allow-remote" help:"Allow an address other machines can reach (and any Host header). The page has no authentication: anyone who reaches it can use it."`

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
  /plan             the ranked plans of 'plan' for a configuration in the
                    query (a catalog model, GPUs from the table)
  /api/plan         GET with that query, or POST it as JSON: the document of
                    'plan --json'
  /doctor           this machine's GPUs, free against total, as doctor reads
  /api/doctor       them (nvidia-smi within 5 s; the Python stack is not
                    probed): the document of 'doctor --json'
  /trace            upload a Kineto trace: category and step bars, the idle
                    time's causes, reliability flags and what-if bounds
  /api/trace        POST a trace as multipart/form-data in field "trace"
                    (what-if=CATEGORY=Sx in the query, repeatable): the
                    document of 'trace --json'

The parameters are the estimate command's flags without their dashes
(model, method, rank, targets, seq-len, batch, grad-accum, grad-ckpt, attn,
fused-ce, optimizer, stack, precision, quant, gpu, gpu-vram-gb,
available-vram-gb, estimator). Errors are JSON {"error", "field", "hint"} in
the command line's words: 400 bad input, 404 a model not in the catalog,
405 wrong method, 413 a body over 64 KiB (a trace over 1 GiB), 502 or 504
when nvidia-smi fails or hangs.

The page serves the embedded catalog and GPU table only: it reads no local
file, reaches no network and never reads a Hugging Face token; the only
program it runs is nvidia-smi (rocm-smi), for /doctor. Uploaded traces are
streamed through the analysis and not stored. It listens on loopback and
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
	s, err := web.New(web.Options{Addr: addr, AllowRemote: c.AllowRemote, Backend: WebBackend(getenv)})
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
