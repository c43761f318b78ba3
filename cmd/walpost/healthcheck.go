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
		Short: "Probe a local walpost's /healthz: exit 0 on 200 (container health checks)",
		Long: "healthcheck GETs http://127.0.0.1:<port of http.listen>/healthz (or --path) of the walpost\n" +
			"running on this host and exits 0 when it answers 200, 1 otherwise (no answer within --timeout,\n" +
			"another status, http.listen empty). It is for images without a shell or curl, such as\n" +
			"walpost's distroless image: a Docker or compose healthcheck runs it in the container.",
		Example: "  walpost healthcheck\n\n" +
			"  # readiness (the slot advancing) instead of liveness\n" +
			"  walpost healthcheck --path /readyz --timeout 5s\n\n" +
			"  # docker-compose.yml\n" +
			"  healthcheck: {test: [\"CMD\", \"walpost\", \"healthcheck\"], interval: 10s}",
		Args: cobra.NoArgs,
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
