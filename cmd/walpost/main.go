// Command walpost forwards outbox rows from PostgreSQL's write-ahead log to
// Kafka. This package is thin: configuration, logging, wiring, exit codes.
package main

import (
	"context"
	"encoding/json"
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
	"github.com/walpost/walpost/internal/buildinfo"
	"github.com/walpost/walpost/internal/redact"
)

// version, commit and date are set at build time with -ldflags
// "-X main.version=… -X main.commit=… -X main.date=…"; what is left empty
// comes from Go's VCS stamp (internal/buildinfo).
var (
	version = "dev"
	commit  string
	date    string
)

// build is what this binary says it is (walpost --version, walpost_build_info).
func build() buildinfo.Info { return buildinfo.Resolve(version, commit, date) }

// exitError carries a specific exit code.
type exitError struct {
	code int
	err  error
	// usage: the command refused its command line (usageError); the
	// message points to --help.
	usage bool
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

// Exit statuses every command shares (README, Commands).
const (
	exitFailure = 1 // the command ran and failed
	exitUsage   = 2 // the command line is wrong: unknown command or flag, bad arguments
)

func main() {
	ctx, stop := signalContext()
	code := execute(ctx, newRootCommand(), os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// execute runs root with args and returns the exit status, having printed
// the error (redacted) to stderr. An error returned by a command's RunE is
// a failure (1, or the code of its exitError); any other error is cobra's
// refusal of the command line, a usage error (2).
func execute(ctx context.Context, root *cobra.Command, args []string, stderr io.Writer) int {
	markRunErrors(root)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(stderr, "walpost:", redact.String(oneLine(ee.err.Error())))
		}
		if ee.usage {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "walpost:", redact.String(err.Error()))
	fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	return exitUsage
}

// markRunErrors wraps the RunE of cmd and its subcommands so that an error
// they return is an *exitError (status 1 unless it carries its own):
// whatever else reaches execute comes from cobra's parsing.
func markRunErrors(cmd *cobra.Command) {
	if run := cmd.RunE; run != nil {
		cmd.RunE = func(c *cobra.Command, args []string) error {
			err := run(c, args)
			var ee *exitError
			if err == nil || errors.As(err, &ee) {
				return err
			}
			return &exitError{code: exitFailure, err: err}
		}
	}
	for _, c := range cmd.Commands() {
		markRunErrors(c)
	}
}

// usageError is a command line the command refuses itself (exit 2).
func usageError(err error) error { return &exitError{code: exitUsage, err: err, usage: true} }

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
		Use:   "walpost",
		Short: "Forward transactional outbox rows from PostgreSQL's WAL to Kafka",
		Long: "walpost forwards the rows applications insert into an outbox table to Kafka, reading them\n" +
			"from PostgreSQL's write-ahead log through a logical replication slot: in commit order, at least\n" +
			"once (or exactly once, delivery.mode), never losing one across crashes and restarts.\n\n" +
			"Configuration comes from a file (--config), WALPOST_* variables and flags, later ones winning;\n" +
			"walpost config --reference lists every key. Exit status: 0 done, 1 failed, 2 usage error.",
		Example: "  # a first install: the schema, the pre-flight, then forward\n" +
			"  export WALPOST_POSTGRES_URL=postgres://walpost:secret@db:5432/app WALPOST_KAFKA_BROKERS=kafka:9092\n" +
			"  walpost migrate && walpost check && walpost run\n\n" +
			"  # shell completion (bash; zsh, fish and powershell too)\n" +
			"  source <(walpost completion bash)",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       build().String(),
	}
	// --version on the root only, without the -v shorthand cobra would add.
	root.Flags().Bool("version", false, "print version, commit and build date")
	root.SetVersionTemplate("walpost {{.Version}}\n")
	// Every command, in one list (cobra sorts them for the help).
	root.AddCommand(
		newRunCommand(),
		newMigrateCommand(),
		newCheckCommand(),
		newStatusCommand(),
		newPoisonCommand(),
		newRecoverCommand(),
		newResendCommand(),
		newPruneCommand(),
		newVerifyCommand(),
		newConfigCommand(),
		newLintCommand(),
		newVersionCommand(),
		newHealthcheckCommand(),
	)
	addCompletionCommand(root)
	return root
}

// addCompletionCommand adds cobra's completion command now rather than at
// Execute, so that its help has examples and docs/cli.md lists it.
func addCompletionCommand(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		c.Example = "  # this shell only\n" +
			"  source <(walpost completion bash)\n\n" +
			"  # every new zsh\n" +
			"  walpost completion zsh > \"${fpath[1]}/_walpost\""
		for _, sh := range c.Commands() {
			switch sh.Name() {
			case "bash", "zsh":
				sh.Example = "  source <(walpost completion " + sh.Name() + ")"
			case "fish":
				sh.Example = "  walpost completion fish | source"
			case "powershell":
				sh.Example = "  walpost completion powershell | Out-String | Invoke-Expression"
			}
		}
	}
}

func newVersionCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print walpost's version, commit and build date",
		Long: "version prints one line: the version, the full commit (-dirty for a build from a modified\n" +
			"tree), the build date and the Go version, as walpost --version does. They are set at link time\n" +
			"(-ldflags \"-X main.version=… -X main.commit=… -X main.date=…\"), otherwise read from the VCS\n" +
			"stamp Go writes into a binary built from a git checkout.\n\n" +
			"With --json: {\"version\", \"commit\", \"date\", \"go_version\"}, an unknown value empty.",
		Example: "  walpost version\n" +
			"  walpost version --json | jq -r .commit",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := build()
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), struct {
					Version   string `json:"version"`
					Commit    string `json:"commit"`
					Date      string `json:"date"`
					GoVersion string `json:"go_version"`
				}{b.Version, b.Commit, b.Date, b.GoVersion})
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "walpost", b.String())
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"version","commit","date","go_version"}`)
	return cmd
}

// writeJSON writes v as indented JSON and a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
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
