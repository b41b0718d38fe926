package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"

	"github.com/spf13/cobra"

	"github.com/miniplane/miniplane/configs"
)

func init() { register(newProbeCommand) }

func newProbeCommand() *cobra.Command {
	cfg := configs.DefaultProbe()
	var b *configs.Binding
	cmd := &cobra.Command{
		Use:   "probe URL [--cacert FILE] [--insecure-skip-tls-verify] [--timeout 2s]",
		Short: "Exit 0 if URL answers a GET with a 2xx status (a health check for images without a shell)",
		Long: `Send one GET to URL and exit 0 if the answer is 2xx, 1 otherwise. Container health checks
use it because the miniplane image holds nothing but this binary: no shell, curl or wget.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := loadConfig(b, &cfg, configs.Probe.Validate); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), cfg.Timeout)
			defer cancel()
			status, err := probe(ctx, args[0], cfg)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), status)
			return nil
		},
	}
	b = configs.Bind(cmd.Flags(), &cfg)
	return cmd
}

// probe GETs rawURL once and returns the status line of a 2xx answer, or an error that
// says why the probe failed (connection, TLS, or a non-2xx status with the body's start).
func probe(ctx context.Context, rawURL string, opts configs.Probe) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("probe: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("probe: URL scheme must be http or https, not %q", u.Scheme)
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: opts.InsecureSkipVerify} //nolint:gosec // opt-in flag
	if opts.CAFile != "" {
		pem, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return "", fmt.Errorf("probe: CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return "", fmt.Errorf("probe: CA file %s holds no PEM certificate", opts.CAFile)
		}
		tlsConfig.RootCAs = pool
	}
	client := &http.Client{
		// No Proxy: a health check talks to its own container, never through HTTP_PROXY.
		Transport: &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true},
		// A health endpoint that redirects is misconfigured; report the redirect itself.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", fmt.Errorf("probe: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("probe: %w", err)
	}
	defer resp.Body.Close()
	// 512 bytes are enough for the reason a health endpoint gives; never read an unbounded body.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return "", fmt.Errorf("probe: %s answered %s: %s", u.Redacted(), resp.Status, body)
	}
	return resp.Status, nil
}
