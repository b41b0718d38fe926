package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/miniplane/miniplane/apiserver"
)

func init() { register(newVersionCommand) }

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the miniplane version and the Kubernetes API version it serves",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := apiserver.VersionInfo()
			fmt.Fprintf(cmd.OutOrStdout(), "miniplane %s (Kubernetes API %s, %s, %s/%s)\n",
				apiserver.Version, info.GitVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}
