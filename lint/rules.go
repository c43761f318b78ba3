package lint

import (
	"errors"
	"strings"
)

// Rule describes one check. ID and Name are stable: configuration and
// --disable refer to them.
type Rule struct {
	ID      string // OBX001…
	Name    string // kebab-case short name
	Summary string // one line: what the rule catches
	Fix     string // the generic fix, also attached to every finding
}

// Rule ids.
const (
	RuleOutboxUniqueKey       = "OBX001"
	RuleOutboxSameTransaction = "OBX002"
	RuleOutboxPollOrder       = "OBX003"
	RuleSentBeforePublish     = "OBX004"
	RulePoisonNoDelete        = "OBX005"
	RuleReplayNewKey          = "OBX006"
	RuleAttemptsUnbounded     = "OBX007"
	RulePublicationScope      = "OBX008"
)

var rules = []Rule{
	{
		ID: RuleOutboxUniqueKey, Name: "outbox-unique-key",
		Summary: "the outbox table's idempotency_key must be NOT NULL and UNIQUE (or the primary key)",
		Fix:     "declare idempotency_key text NOT NULL UNIQUE (or add a unique index on idempotency_key alone)",
	},
	{
		ID: RuleOutboxSameTransaction, Name: "outbox-same-transaction",
		Summary: "an INSERT INTO outbox must commit in the same transaction as the business write it belongs to",
		Fix:     "put the business write and the INSERT INTO outbox in one BEGIN … COMMIT block",
	},
	{
		ID: RuleOutboxPollOrder, Name: "outbox-poll-order",
		Summary: "a poller that reads the outbox with LIMIT or FOR UPDATE SKIP LOCKED must ORDER BY created_at (or the id/sequence)",
		Fix:     "add ORDER BY created_at (or the sequence/id column), ascending, before LIMIT / FOR UPDATE SKIP LOCKED",
	},
	{
		ID: RuleSentBeforePublish, Name: "outbox-sent-before-publish",
		Summary: "UPDATE outbox SET sent_at must come after the publish step, never before it",
		Fix:     "publish first and set sent_at only once the broker acknowledged the record (walpost itself never needs sent_at)",
	},
	{
		ID: RulePoisonNoDelete, Name: "poison-no-delete",
		Summary: "rows of the poison table are never deleted or truncated, and its no-delete trigger is never dropped or disabled",
		Fix:     "keep quarantined rows; replay them (walpost poison replay) and let replayed_at/replay_count record it",
	},
	{
		ID: RuleReplayNewKey, Name: "replay-new-key",
		Summary: "a replay from the poison table must re-insert the original idempotency_key, not a newly generated one",
		Fix:     "insert the poison row's own idempotency_key (with ON CONFLICT (idempotency_key) DO NOTHING if the row may still be there)",
	},
	{
		ID: RuleAttemptsUnbounded, Name: "attempts-unbounded",
		Summary: "a retry loop that increments attempts needs a bound (attempts compared against a maximum), and max_attempts must not be 0",
		Fix:     "stop retrying at a bound (e.g. WHERE attempts < 5) and quarantine the row in the poison table; max_attempts ≥ 1",
	},
	{
		ID: RulePublicationScope, Name: "publication-scope",
		Summary: "the outbox publication publishes inserts only and names its tables (no FOR ALL TABLES / TABLES IN SCHEMA)",
		Fix:     "CREATE PUBLICATION … FOR TABLE outbox WITH (publish = 'insert')",
	},
}

// Rules returns every rule, in id order.
func Rules() []Rule {
	out := make([]Rule, len(rules))
	copy(out, rules)
	return out
}

func ruleByID(id string) Rule {
	for _, r := range rules {
		if r.ID == id {
			return r
		}
	}
	panic("lint: unknown rule " + id)
}

// LookupRule finds a rule by id or name, case-insensitively.
func LookupRule(s string) (Rule, bool) {
	s = strings.TrimSpace(s)
	for _, r := range rules {
		if strings.EqualFold(r.ID, s) || strings.EqualFold(r.Name, s) {
			return r, true
		}
	}
	return Rule{}, false
}

// ErrUnknownRule is wrapped by Lint and Run when Options.Disable names no rule.
var ErrUnknownRule = errors.New("unknown lint rule")
