package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
)

// subcommands are registered by the file that defines each one, so components can be
// added without touching this file.
var subcommands []func() *cobra.Command

func register(newCommand func() *cobra.Command) { subcommands = append(subcommands, newCommand) }

type globalFlags struct {
	logLevel  string
	logFormat string
}

var global globalFlags

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "miniplane",
		Short:         "A standalone, etcd-backed mini Kubernetes control plane that runs the DaemonSet controller for real",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return setupLogging(global.logLevel, global.logFormat)
		},
	}
	root.PersistentFlags().StringVar(&global.logLevel, "log-level", envOr("MINIPLANE_LOG_LEVEL", "info"), "log level: debug, info, warn, error (env MINIPLANE_LOG_LEVEL)")
	root.PersistentFlags().StringVar(&global.logFormat, "log-format", envOr("MINIPLANE_LOG_FORMAT", "text"), "log format: text or json (env MINIPLANE_LOG_FORMAT)")
	for _, newCommand := range subcommands {
		root.AddCommand(newCommand())
	}
	return root
}

func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

// setupLogging installs a slog handler as the default logger and routes client-go's klog
// into it, so every component logs in one structured format.
func setupLogging(level, format string) error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler
	switch strings.ToLower(format) {
	case "text":
		h = slog.NewTextHandler(os.Stderr, opts)
	case "json":
		h = slog.NewJSONHandler(os.Stderr, opts)
	default:
		return fmt.Errorf("--log-format must be text or json, not %q", format)
	}
	logger := slog.New(h)
	slog.SetDefault(logger)
	klog.SetSlogLogger(logger)
	return nil
}

// etcdLogLevel maps our level to etcd's zap levels; etcd is chatty at info.
func etcdLogLevel() string {
	switch strings.ToLower(global.logLevel) {
	case "debug":
		return "info"
	default:
		return "error"
	}
}
