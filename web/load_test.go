package web

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestLoad sends CANIFINETUNE_LOAD estimate requests (e.g. 20000) at 32
// concurrent over loopback and reports the p50/p99 latency, the errors (it
// fails on any) and the server's peak RSS. It is a measurement, not a
// check of speed, and runs only when asked:
//
//	CANIFINETUNE_LOAD=20000 go test ./web -run TestLoad -v
//
// By default the server is an httptest server in the test's own process
// (the RSS is then the client's and the server's together); with
// CANIFINETUNE_LOAD_BIN=path/to/canifinetune the test starts `serve` from
// that binary and reports that process's RSS alone.
func TestLoad(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("CANIFINETUNE_LOAD"))
	if n <= 0 {
		t.Skip("set CANIFINETUNE_LOAD=20000 to run the load test")
	}
	const concurrency = 32
	base, rss := "", vmHWM
	if bin := os.Getenv("CANIFINETUNE_LOAD_BIN"); bin != "" {
		base, rss = startServe(t, bin)
	} else {
		base = server(t).URL
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrency}}
	// Vary the configuration so the server does real work on each request.
	paths := []string{
		good,
		"/api/estimate?model=Qwen/Qwen2.5-7B&method=full&gpu=a100-80gb&seq-len=2048",
		"/api/estimate?model=meta-llama/Llama-3.1-8B&method=lora&rank=64&targets=all-linear&gpu=rtx-4090",
		"/api/estimate?model=Qwen/Qwen2.5-0.5B&stack=unsloth&gpu=t4&batch=8",
	}
	var next, errs atomic.Int64
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				t0 := time.Now()
				resp, err := client.Get(base + paths[i%int64(len(paths))])
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						errs.Add(1)
					}
				}
				if err != nil {
					errs.Add(1)
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	slices.Sort(lat)
	t.Logf("%d requests, %d concurrent, %.1f s: %.0f req/s; latency p50 %v, p99 %v, max %v; errors %d; %s",
		n, concurrency, wall.Seconds(), float64(n)/wall.Seconds(), lat[n/2], lat[n*99/100], lat[n-1], errs.Load(), rss())
	if errs.Load() != 0 {
		t.Errorf("%d of %d requests failed", errs.Load(), n)
	}
}

// vmHWM is the process's peak resident set (test client and server share
// the process), from /proc/self/status.
func vmHWM() string { return "peak RSS (client and server) " + procRSS("self") }

// procRSS is VmHWM (the peak) and VmRSS (now) of a process, from
// /proc/PID/status.
func procRSS(pid string) string {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return "unknown"
	}
	var hwm, now string
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			hwm = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			now = strings.TrimSpace(v)
		}
	}
	return hwm + " (now " + now + ")"
}

// startServe runs `bin serve` on a free loopback port (the catalog only:
// no Hub) until the test ends, and returns its URL and a reader of its RSS.
func startServe(t *testing.T, bin string) (string, func() string) {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--no-hub")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("serve printed no URL: %v", err)
	}
	u := strings.TrimSuffix(strings.TrimSpace(line[strings.Index(line, "http://"):]), "/")
	pid := strconv.Itoa(cmd.Process.Pid)
	return u, func() string { return "server (pid " + pid + ") peak RSS " + procRSS(pid) }
}
