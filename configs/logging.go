package configs

import (
	"log/slog"
	"strings"
)

// Logging configures the logs of every command (persistent flags of the root command).
type Logging struct {
	// Level is debug, info, warn or error; default info. Flag --log-level.
	Level string `mapstructure:"log-level" flag:"log-level" help:"log level: debug, info, warn, error"`
	// Format is text or json; default text. Flag --log-format.
	Format string `mapstructure:"log-format" flag:"log-format" help:"log format: text or json"`
}

// DefaultLogging returns the defaults.
func DefaultLogging() Logging { return Logging{Level: "info", Format: "text"} }

// SlogLevel is Level as a slog level.
func (c Logging) SlogLevel() slog.Level {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.Level)) // Validate has rejected what does not parse
	return lvl
}

// EtcdLevel is the zap level an embedded etcd logs at. etcd is chatty at info (every
// request, every compaction), so it speaks at info only when miniplane logs at debug, and
// reports errors otherwise.
func (c Logging) EtcdLevel() string {
	if c.SlogLevel() <= slog.LevelDebug {
		return "info"
	}
	return "error"
}

// Validate reports the first problem with c.
func (c Logging) Validate() error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.Level)); err != nil {
		return invalidf("log-level", "%q is not debug, info, warn or error", c.Level)
	}
	switch strings.ToLower(c.Format) {
	case "text", "json":
		return nil
	}
	return invalidf("log-format", "must be text or json, not %q", c.Format)
}
