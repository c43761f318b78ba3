// Command walpost forwards outbox rows from PostgreSQL's write-ahead log to
// Kafka. This package is thin: configuration, logging, wiring, exit codes.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/redact"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// exitError carries a specific exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signalContext()
	defer stop()
	root := newRootCommand()
	err := root.ExecuteContext(ctx)
	if err == nil {
		return
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(os.Stderr, "walpost:", redact.String(ee.err.Error()))
		}
		os.Exit(ee.code)
	}
	fmt.Fprintln(os.Stderr, "walpost:", redact.String(err.Error()))
	os.Exit(1)
}

// signalContext cancels on the first SIGINT/SIGTERM (drain and confirm);
// a second signal exits at once.
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		n := 0
		for range ch {
			n++
			if n == 1 {
				fmt.Fprintln(os.Stderr, "walpost: stopping (a second signal exits at once)")
				cancel()
				continue
			}
			fmt.Fprintln(os.Stderr, "walpost: second signal, exiting now")
			os.Exit(130)
		}
	}()
	return ctx, func() { signal.Stop(ch); cancel() }
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "walpost",
		Short:         "Forward transactional outbox rows from PostgreSQL's WAL to Kafka",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	config.AddFlags(root.PersistentFlags())
	// Every command, in one list (cobra sorts them for the help).
	root.AddCommand(
		newRunCommand(),
		newMigrateCommand(),
		newCheckCommand(),
		newStatusCommand(),
		newPoisonCommand(),
		newVerifyCommand(),
		newConfigCommand(),
		newLintCommand(),
		newVersionCommand(),
	)
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print walpost's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "walpost", version)
			return err
		},
	}
}

// newLogger builds the process logger from config.
func newLogger(w io.Writer, cfg config.Log) *slog.Logger {
	var level slog.Level
	switch strings.ToLower(cfg.Level) {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
