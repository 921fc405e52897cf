package web_test

import (
	"bytes"
	"context"
	"flag"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/canifinetune/canifinetune/web"
)

// Browser tests: the pages in a real headless Chromium (Debian's chromium
// package, installed by .ci/run). Without a browser they skip, except
// under CI=true, where a missing browser is a failure: CI must run them.

var updateScreenshots = flag.Bool("update-screenshots", false, "write the browser tests' screenshots to testdata/screenshots")

// browserTimeout bounds one browser test, start-up included.
const browserTimeout = 90 * time.Second

func findBrowser(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CANIFINETUNE_CHROME"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no Chromium found (chromium, chromium-browser, google-chrome, headless-shell on PATH, or $CANIFINETUNE_CHROME): CI must run the browser tests; .ci/run installs Debian's chromium")
	}
	t.Skip("no Chromium found: install Debian's chromium (apt-get install chromium) or set CANIFINETUNE_CHROME to run the browser tests")
	return ""
}

// browser starts a headless Chromium for one test, bounded by
// browserTimeout. As root Chromium refuses to start without --no-sandbox.
func browser(t *testing.T) context.Context {
	t.Helper()
	exe := findBrowser(t)
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	t.Cleanup(cancel)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900), chromedp.Flag("disable-dev-shm-usage", true))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start %s: %v", exe, err)
	}
	return bctx
}

// screenshot saves the page under the test's temporary directory, and
// under testdata/screenshots with -update-screenshots.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if len(png) < 1000 {
		t.Fatalf("screenshot %s: %d bytes", name, len(png))
	}
	dirs := []string{t.TempDir()}
	if *updateScreenshots {
		dirs = append(dirs, filepath.Join("testdata", "screenshots"))
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(d, name+".png")
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s", p)
	}
}

// run runs one action that returns a value, failing the test on an error.
func run[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// do runs actions that return nothing, failing the test on an error.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestBrowserCalculator loads the calculator with a shared configuration,
// reads the verdict and the bar, changes an input (the page resubmits on
// change), and follows the page's own link to the view.
func TestBrowserCalculator(t *testing.T) {
	ctx := browser(t)
	ts := newServer(t, web.Options{})
	do(t, ctx, "load", chromedp.Navigate(ts.URL+"/?model=Qwen/Qwen2.5-7B&method=qlora&gpu=h100"))
	verdict := run(t, ctx, "verdict", chromedp.Text(chromedp.CSS("#verdict")))
	segments := run(t, ctx, "bar", chromedp.Evaluate[int](`document.querySelectorAll("#bar rect").length`))
	if verdict != "yes" || segments < 4 {
		t.Fatalf("qlora on an H100: verdict %q, %d bar segments; want yes and ≥ 4", verdict, segments)
	}
	screenshot(t, ctx, "calculator-qlora-h100")

	// Full fine-tuning of 7B with AdamW in 80 GiB does not fit: change the method.
	const weights = `+document.querySelector('#bar rect[data-component="weights"]').getAttribute("width")`
	before := run(t, ctx, "weights", chromedp.Evaluate[float64](weights))
	// SetValue fires input and change, as a user's choice does; the page
	// resubmits its form on change, and RunResponse waits for that load.
	if resp, err := chromedp.RunResponse(ctx, chromedp.SetValue(chromedp.CSS(`select[name="method"]`), "full")); err != nil || resp.Status != 200 {
		t.Fatalf("change the method: %v", err)
	}
	if loc := run(t, ctx, "location", chromedp.Location()); !strings.Contains(loc, "method=full") {
		t.Errorf("after the change the URL is %s, want method=full in it", loc)
	}
	verdict = run(t, ctx, "verdict", chromedp.Text(chromedp.CSS("#verdict")))
	after := run(t, ctx, "weights", chromedp.Evaluate[float64](weights))
	href := run(t, ctx, "share", chromedp.Evaluate[string](`document.querySelector("#share").getAttribute("href")`))
	if verdict != "no" || !(after > before) {
		t.Errorf("full: verdict %q, weights bar %.1f → %.1f; want no and a wider weights segment", verdict, before, after)
	}
	screenshot(t, ctx, "calculator-full-h100")

	// The shared link reproduces the view in a fresh tab.
	u, err := url.Parse(href)
	if err != nil || u.Query().Get("method") != "full" || u.Query().Get("gpu") != "h100" {
		t.Fatalf("share link %q: %v", href, err)
	}
	tab, cancel := chromedp.NewContext(ctx)
	defer cancel()
	do(t, tab, "follow the link", chromedp.Navigate(ts.URL+href))
	if again := run(t, tab, "verdict", chromedp.Text(chromedp.CSS("#verdict"))); again != verdict {
		t.Errorf("shared link %s: verdict %q, want %q", href, again, verdict)
	}
}

// TestBrowserPlan loads the plan view with a configuration in the URL and
// reads the ranked table.
func TestBrowserPlan(t *testing.T) {
	ctx := browser(t)
	ts := newServer(t, web.Options{})
	do(t, ctx, "load", chromedp.Navigate(ts.URL+"/plan?model=Qwen/Qwen2.5-7B&gpus=2xrtx-4090&dataset-tokens=1e8&price-per-hour=0.7"),
		chromedp.WaitVisible(chromedp.CSS("table.plans")))
	rows := run(t, ctx, "rows", chromedp.Evaluate[int](`document.querySelectorAll("table.plans tbody tr").length`))
	first := run(t, ctx, "first plan", chromedp.Text(chromedp.CSS("table.plans tbody tr td:nth-child(2)")))
	if rows == 0 || first == "" {
		t.Fatalf("plan table: %d rows, first method %q", rows, first)
	}
	// The first download link (rows the stacks cannot run as estimated
	// have none), fetched as a browser would follow it: the recipe's zip.
	href := run(t, ctx, "recipe link", chromedp.Evaluate[string](`document.querySelector("table.plans tbody tr a.recipe").getAttribute("href")`))
	if !strings.HasPrefix(href, "/api/plan/recipe?") || !strings.Contains(href, "&plan=") {
		t.Fatalf("recipe link %q", href)
	}
	if status, b := get(t, ts, "GET", href, "", nil); status != 200 || !bytes.HasPrefix(b, []byte("PK\x03\x04")) {
		t.Errorf("recipe link %s: status %d, %d bytes, not a zip", href, status, len(b))
	}
	screenshot(t, ctx, "plan-qwen7b-2x4090")
}

// TestBrowserTrace uploads each test trace through the form and reads the
// report: the category bars, the source, and the what-if rows that the
// speed-up select shows.
func TestBrowserTrace(t *testing.T) {
	ctx := browser(t)
	ts := newServer(t, web.Options{})
	for i, f := range traceFiles {
		abs, err := filepath.Abs(f)
		if err != nil {
			t.Fatal(err)
		}
		do(t, ctx, "upload "+f, chromedp.Navigate(ts.URL+"/trace"),
			chromedp.SetUploadFiles(chromedp.CSS("#tracefile"), []string{abs}))
		// RunResponse waits for the navigation the form's submission starts.
		resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS("#traceform button")))
		if err != nil {
			t.Fatalf("submit %s: %v", f, err)
		}
		if resp.Status != 200 {
			t.Fatalf("submit %s: status %d", f, resp.Status)
		}
		if msg := run(t, ctx, "problem", chromedp.Evaluate[string](`(document.querySelector(".problem") || {}).textContent || ""`)); msg != "" {
			t.Fatalf("upload %s: %s", f, msg)
		}
		source := run(t, ctx, "source", chromedp.Text(chromedp.CSS("#source")))
		cats := run(t, ctx, "categories", chromedp.Evaluate[int](`document.querySelectorAll("svg.cats g[data-category]").length`))
		const visible = `[...document.querySelectorAll("table.whatif tr[data-speedup]")].filter(r => r.offsetParent !== null)`
		shown := run(t, ctx, "what-if at 2x", chromedp.Evaluate[int](visible+`.filter(r => r.dataset.speedup === "2").length`))
		do(t, ctx, "speed-up 4x", chromedp.SetValue(chromedp.CSS("#speedup"), "4"))
		// Rows of 4× count 1, rows of any other speed-up 1000.
		shownAt4 := run(t, ctx, "what-if at 4x", chromedp.Evaluate[int](visible+`.map(r => r.dataset.speedup === "4" ? 1 : 1000).reduce((a, b) => a + b, 0)`))
		if source != filepath.Base(f) || cats == 0 || shown == 0 || shownAt4 != shown {
			t.Errorf("%s: source %q, %d category bars, %d rows at 2×, %d at 4× (1000 per other speed-up shown)", f, source, cats, shown, shownAt4)
		}
		if i == 0 || strings.Contains(f, "ns_resolution") {
			screenshot(t, ctx, "trace-"+strings.TrimSuffix(filepath.Base(f), ".json.gz"))
		}
	}
}
