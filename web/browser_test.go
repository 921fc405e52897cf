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

	"github.com/canifinetune/canifinetune/catalog"
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
	// The segment labels drawn inside the bar do not overlap each other
	// or leave their segment (the small ones have none, only a title).
	overlaps := run(t, ctx, "labels", chromedp.Evaluate[string](`(() => {
		const out = [];
		for (const g of document.querySelectorAll("#bar g[data-component]")) {
			const t = g.querySelector("text"), r = g.querySelector("rect").getBBox();
			if (!t) continue;
			const b = t.getBBox();
			if (b.x < r.x || b.x + b.width > r.x + r.width) out.push(g.dataset.component + " label leaves its segment");
		}
		const marks = [...document.querySelectorAll("#bar text.mark")].map(t => t.getBBox());
		for (let i = 0; i < marks.length; i++) for (let j = i + 1; j < marks.length; j++) {
			const a = marks[i], b = marks[j];
			if (a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height) out.push("mark labels " + i + " and " + j + " overlap");
		}
		return out.join("; ");
	})()`))
	if overlaps != "" {
		t.Errorf("bar labels: %s", overlaps)
	}
	// The screenshot shows the held-out error too: wait for the
	// background cross-validation, then reload.
	if err := web.WaitHeldOut(); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "reload", chromedp.Reload())
	if n := run(t, ctx, "held out", chromedp.Evaluate[int](`document.querySelectorAll("#errors td.heldout").length`)); n == 0 {
		t.Error("no held-out error figures on the page")
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
		hist := run(t, ctx, "histogram", chromedp.Evaluate[int](`document.querySelectorAll("svg.gaphist g[data-bin]").length`))
		// The select sets every category's slider; one slider moves its row only.
		const outputs = `[...document.querySelectorAll("table.whatif tr[data-category] output")].map(o => o.textContent).join(",")`
		const saved = `[...document.querySelectorAll("table.whatif tr[data-category] td:nth-child(3)")].map(o => o.textContent).join(",")`
		at2 := run(t, ctx, "what-if at 2x", chromedp.Evaluate[string](outputs))
		saved2 := run(t, ctx, "saved at 2x", chromedp.Evaluate[string](saved))
		do(t, ctx, "speed-up 4x", chromedp.SetValue(chromedp.CSS("#speedup"), "4"))
		at4 := run(t, ctx, "what-if at 4x", chromedp.Evaluate[string](outputs))
		saved4 := run(t, ctx, "saved at 4x", chromedp.Evaluate[string](saved))
		do(t, ctx, "first slider to 10x", chromedp.SetValue(chromedp.CSS("table.whatif input.speedup"), "5"))
		first := run(t, ctx, "first row", chromedp.Evaluate[string](`document.querySelector("table.whatif tr[data-category] output").textContent`))
		n := strings.Count(at2, ",") + 1
		if source != filepath.Base(f) || cats == 0 || hist == 0 || at2 != strings.TrimSuffix(strings.Repeat("2×,", n), ",") ||
			at4 != strings.TrimSuffix(strings.Repeat("4×,", n), ",") || saved4 == saved2 || first != "10×" {
			t.Errorf("%s: source %q, %d category bars, %d histogram bins, sliders %q then %q (saved %q then %q), first slider %q", f, source, cats, hist, at2, at4, saved2, saved4, first)
		}
		if i == 0 || strings.Contains(f, "ns_resolution") {
			screenshot(t, ctx, "trace-"+strings.TrimSuffix(filepath.Base(f), ".json.gz"))
		}
	}
}

// TestBrowserConfigUpload uploads a local config.json through the page's
// form (the page submits it on choice) and reads the verdict of the view it
// lands on, which keeps the card chosen before.
func TestBrowserConfigUpload(t *testing.T) {
	ctx := browser(t)
	ts := newServer(t, web.Options{})
	e, err := catalog.Lookup("Qwen/Qwen2.5-7B")
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfg, e.Config, 0o644); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "load", chromedp.Navigate(ts.URL+"/?model=Qwen/Qwen2.5-7B&gpu=rtx-4090&method=qlora"))
	want := run(t, ctx, "verdict", chromedp.Text(chromedp.CSS("#verdict")))
	resp, err := chromedp.RunResponse(ctx, chromedp.SetUploadFiles(chromedp.CSS("#configfile"), []string{cfg}))
	if err != nil || resp.Status != 200 {
		t.Fatalf("upload: %v", err)
	}
	loc := run(t, ctx, "location", chromedp.Location())
	got := run(t, ctx, "verdict", chromedp.Text(chromedp.CSS("#verdict")))
	if !strings.Contains(loc, "model=config%3A") || !strings.Contains(loc, "gpu=rtx-4090") || got != want {
		t.Errorf("after the upload: %s, verdict %q; want a config: model, the card kept, verdict %q", loc, got, want)
	}
	screenshot(t, ctx, "calculator-uploaded-config")
}
