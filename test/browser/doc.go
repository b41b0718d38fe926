// Package browser tests the browser view at /ui/ (docs/ui.md) in a real browser: headless
// Chromium from the distribution's package, driven with chromedp, against a whole control
// plane from test/testenv. Without a Chromium the tests skip, loudly, unless
// MINIPLANE_BROWSER_REQUIRED is set (.ci/run sets it once it has installed the package).
package browser
