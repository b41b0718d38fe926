package configs

import "time"

// UI configures the browser view the API server serves at /ui/ (docs/ui.md). It is a section
// of APIServer: `ui:` under `apiserver:` in YAML, --ui-… flags on `miniplane apiserver` and
// --apiserver-ui-… on `miniplane up`.
type UI struct {
	// Enabled serves the view; default true. Flag --ui-enabled.
	Enabled bool `mapstructure:"enabled" flag:"enabled" help:"serve the browser view at /ui/ on the HTTPS port"`
	// SignInLinkTTL is how long a sign-in link (the URL `miniplane up` prints) stays valid;
	// each link also works only once. Default 15m: long enough to open it after start-up,
	// short enough that a link left in a terminal's scrollback is useless. Flag
	// --ui-sign-in-link-ttl.
	SignInLinkTTL time.Duration `mapstructure:"sign-in-link-ttl" flag:"sign-in-link-ttl" help:"how long a printed sign-in link stays valid (each works once)"`
	// SessionTTL is how long a browser session lasts after sign-in; default 12h, a working
	// day. Flag --ui-session-ttl.
	SessionTTL time.Duration `mapstructure:"session-ttl" flag:"session-ttl" help:"how long a browser session lasts after sign-in"`
}

// DefaultUI returns the view's defaults.
func DefaultUI() UI {
	return UI{Enabled: true, SignInLinkTTL: 15 * time.Minute, SessionTTL: 12 * time.Hour}
}

// Validate reports the first problem with c; the durations of a view that is off are not
// looked at.
func (c UI) Validate() error {
	switch {
	case !c.Enabled:
		return nil
	case c.SignInLinkTTL <= 0:
		return invalid("sign-in-link-ttl", "must be positive")
	case c.SessionTTL <= 0:
		return invalid("session-ttl", "must be positive")
	}
	return nil
}
