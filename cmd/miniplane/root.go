package main

import (
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/miniplane/miniplane/configs"
)

// subcommands are registered by the file that defines each one, so components can be
// added without touching this file.
var subcommands []func() *cobra.Command

func register(newCommand func() *cobra.Command) { subcommands = append(subcommands, newCommand) }

// logging is the root command's configuration, shared by every subcommand; it is loaded
// before a subcommand runs.
var logging = configs.DefaultLogging()

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "miniplane",
		Short:         "A standalone, etcd-backed mini Kubernetes control plane that runs the DaemonSet controller for real",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	b := configs.BindFlagsOnly(root.PersistentFlags(), &logging)
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if err := b.Load(); err != nil {
			return err
		}
		if err := b.Check(logging.Validate()); err != nil {
			return err
		}
		setupLogging(logging)
		return nil
	}
	for _, newCommand := range subcommands {
		root.AddCommand(newCommand())
	}
	return root
}

// setupLogging installs a slog handler as the default logger and routes client-go's klog
// into it, so every component logs in one structured format.
func setupLogging(c configs.Logging) {
	opts := &slog.HandlerOptions{Level: c.SlogLevel()}
	var h slog.Handler = slog.NewTextHandler(os.Stderr, opts)
	if strings.EqualFold(c.Format, "json") {
		h = slog.NewJSONHandler(os.Stderr, opts)
	}
	logger := slog.New(h)
	slog.SetDefault(logger)
	klog.SetSlogLogger(logger)
}

// loadConfig loads cfg through its binding and checks the loaded value with validate,
// naming a bad option the way the user set it. validate is a method expression
// (configs.Etcd.Validate) applied after loading: a method value (cfg.Validate) would copy
// cfg before Load fills it and check the defaults instead.
func loadConfig[T any](b *configs.Binding, cfg *T, validate func(T) error) error {
	if err := b.Load(); err != nil {
		return err
	}
	return b.Check(validate(*cfg))
}
