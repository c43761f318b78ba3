package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

// newHealthcheckCommand probes a running walpost's /healthz on
// http.listen, for images without a shell or curl (the compose file's
// healthcheck). A small net/http GET rather than a probe binary in the
// image: the distroless runtime has nothing else to run.
func newHealthcheckCommand() *cobra.Command {
	var path string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "healthcheck",
		Short: "Exit 0 when the walpost serving http.listen on this host answers 200 on /healthz (container health probes)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			if cfg.HTTP.Listen == "" {
				return errors.New("http.listen (WALPOST_HTTP_LISTEN) is empty: no server to probe")
			}
			host, port, err := net.SplitHostPort(cfg.HTTP.Listen)
			if err != nil {
				return fmt.Errorf("http.listen %q: %w", cfg.HTTP.Listen, err)
			}
			if host == "" || host == "0.0.0.0" || host == "::" {
				host = "127.0.0.1"
			}
			url := "http://" + net.JoinHostPort(host, port) + path
			cl := &http.Client{Timeout: timeout}
			resp, err := cl.Get(url)
			if err != nil {
				return fmt.Errorf("healthcheck %s: %w", url, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("healthcheck %s: %s", url, resp.Status)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&path, "path", "/healthz", "path to probe (/healthz or /readyz)")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "give up after this long")
	addConfigFlags(cmd, flagsHTTP)
	return cmd
}
