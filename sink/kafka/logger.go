package kafka

import (
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"
)

// routineInfo are the lines franz-go writes at INFO on every transaction
// or flush. In exactly-once mode a live stream commits each PostgreSQL
// transaction, hundreds of Kafka transactions a second, and each wrote
// five of these lines (two "flushing", "ending transaction", "end
// transaction response successfully received", "beginning
// transaction"): a log at INFO was mostly them, and writing them cost
// about 6 % of walpost's CPU at 10,000 events/s. They go to DEBUG,
// except an abort's (commit=false: rare, and worth seeing); franz-go's
// other lines keep their level.
var routineInfo = map[string]bool{
	"flushing":              true,
	"beginning transaction": true,
	"ending transaction":    true,
	"end transaction response successfully received": true,
}

// clientLogger is the franz-go client's logger: walpost's, through kslog,
// with routineInfo at DEBUG.
type clientLogger struct{ *kslog.Logger }

// Log writes a franz-go line, a routine one at DEBUG.
func (l clientLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	if level == kgo.LogLevelInfo && routineInfo[msg] && !aborting(keyvals) {
		level = kgo.LogLevelDebug
	}
	l.Logger.Log(level, msg, keyvals...)
}

// aborting says whether keyvals hold "commit", false: franz-go's line of
// an EndTxn that aborts.
func aborting(keyvals []any) bool {
	for i := 0; i+1 < len(keyvals); i += 2 {
		if keyvals[i] == "commit" {
			commit, ok := keyvals[i+1].(kgo.TransactionEndTry)
			return ok && !bool(commit)
		}
	}
	return false
}
