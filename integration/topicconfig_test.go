package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// raiseMaxMessageBytes sets each topic's max.message.bytes to 1048588 (the
// broker's default) and waits until the broker describes the new value: an
// alter is answered before the broker's log applies it, and a replay sent
// in between is refused again with MESSAGE_TOO_LARGE.
func raiseMaxMessageBytes(t testing.TB, f *fixture, topics ...string) {
	t.Helper()
	ctx := context.Background()
	const value = "1048588"
	resp, err := f.Admin.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: ptr(value)}}, topics...)
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range topics {
		if _, err := resp.On(topic, nil); err != nil {
			t.Fatalf("alter max.message.bytes of %s: %v", topic, err)
		}
	}
	waitFor(t, 30*time.Second, "max.message.bytes "+value+" described for "+strings.Join(topics, ", "), func() bool {
		rc, err := f.Admin.DescribeTopicConfigs(ctx, topics...)
		if err != nil {
			return false
		}
		for _, topic := range topics {
			c, err := rc.On(topic, nil)
			if err != nil {
				return false
			}
			ok := false
			for _, v := range c.Configs {
				if v.Key == "max.message.bytes" {
					ok = v.MaybeValue() == value
				}
			}
			if !ok {
				return false
			}
		}
		return true
	})
}

// replayPoison runs walpost poison replay with args, again while the
// broker still refuses a replayed record with MESSAGE_TOO_LARGE after
// raiseMaxMessageBytes (each failed attempt keeps the rows, with the new
// error); it returns the last attempt's output and error.
func replayPoison(t testing.TB, env []string, args ...string) (string, error) {
	t.Helper()
	var out string
	var err error
	waitFor(t, 30*time.Second, "poison replay "+strings.Join(args, " "), func() bool {
		out, err = walpostOutput(t, env, append([]string{"poison", "replay"}, args...)...)
		if err != nil && strings.Contains(out, "MESSAGE_TOO_LARGE") {
			t.Logf("replay refused before the broker applied the new max.message.bytes, again:\n%s", out)
			return false
		}
		return true
	})
	return out, err
}
