// Package browsertest starts a real headless Chromium for end-to-end tests
// of the console, driven through the Chrome DevTools Protocol (chromedp).
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/internal/testenv"
)

// BinEnv names an environment variable that may point at the browser.
const BinEnv = "COUNTERSIGN_CHROMIUM"

// Path returns the Chromium binary to use, or "" when there is none.
func Path() string {
	if p := os.Getenv(BinEnv); p != "" {
		return p
	}
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	return ""
}

// running holds one token per browser started by New and not yet ended.
var running = make(chan struct{}, 2)

// New starts a fresh headless browser (own profile, no network beyond
// loopback needs) for the test and returns a tab context that lives until
// the test ends. It skips the test when no browser is installed, or fails
// it when COUNTERSIGN_REQUIRE_E2E=1.
func New(t testing.TB) context.Context {
	t.Helper()
	testenv.SkipShort(t, "Chromium")
	bin := Path()
	if bin == "" {
		testenv.SkipOrFail(t, "no Chromium found (looked at /usr/bin/chromium and $%s); install the chromium package to run browser tests", BinEnv)
	}
	// Parallel tests share the machine: at most two browsers at once.
	running <- struct{}{}
	t.Cleanup(func() { <-running })
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "profile")),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	// The first action starts the browser; it must not carry a timeout,
	// which would end the browser with it.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	return ctx
}

// Screenshot saves a full-page PNG (quality 100 makes Chromium encode PNG) of the current tab under dir/name and
// returns its path.
//
// Each try is bounded: on a loaded machine Chromium has been seen to leave
// a capture of a live page unanswered for good, which held the whole test
// binary until its deadline. A capture that does not come within 30s is
// tried again, twice, before the test fails saying so.
func Screenshot(t testing.TB, ctx context.Context, dir, name string) string {
	t.Helper()
	var (
		buf []byte
		err error
	)
	for try := 0; try < 3; try++ {
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		buf, err = chromedp.Run(tctx, chromedp.FullScreenshot(100))
		cancel()
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
