package app_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/internal/browsertest"
)

// journey is a browser tab plus the small vocabulary the browser tests
// speak: run steps with a timeout, read an element's text, take a
// screenshot (also into docs/screenshots with
// COUNTERSIGN_UPDATE_SCREENSHOTS=1, for the README).
type journey struct {
	t     *testing.T
	ctx   context.Context
	shots string
}

func newJourney(t *testing.T) *journey {
	return &journey{t: t, ctx: browsertest.New(t), shots: t.TempDir()}
}

func (j *journey) shot(name string) {
	j.t.Helper()
	path := browsertest.Screenshot(j.t, j.ctx, j.shots, name)
	if os.Getenv("COUNTERSIGN_UPDATE_SCREENSHOTS") == "1" {
		b, _ := os.ReadFile(path)
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "screenshots", name), b, 0o644); err != nil {
			j.t.Fatal(err)
		}
	}
}

func (j *journey) step(what string, actions ...chromedp.Action[chromedp.Void]) {
	j.t.Helper()
	sctx, cancel := context.WithTimeout(j.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		j.t.Fatalf("%s: %v", what, err)
	}
}

func (j *journey) text(sel string) string {
	j.t.Helper()
	sctx, cancel := context.WithTimeout(j.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		j.t.Fatalf("text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// liveText is the text of the first element sel matches ("" when none),
// read in one evaluation in the page: on a page that updates itself, the
// element chromedp.Text found can be swapped out before its text is read.
func (j *journey) liveText(sel string) string {
	j.t.Helper()
	sctx, cancel := context.WithTimeout(j.ctx, 10*time.Second)
	defer cancel()
	q, _ := json.Marshal(sel)
	s, err := chromedp.Run(sctx, chromedp.Evaluate[string](`document.querySelector(`+string(q)+`)?.textContent ?? ""`))
	if err != nil {
		j.t.Fatalf("text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}
