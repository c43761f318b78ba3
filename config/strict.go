package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/walpost/walpost/internal/redact"
)

// allowedVariables are the WALPOST_* variables that are not config keys
// and that Load accepts in its environment, each with the reason.
var allowedVariables = map[string]string{
	"WALPOST_REQUIRE_STACK":    "integration tests: fail instead of skipping when the stack is down (Makefile)",
	"WALPOST_SOAK":             "integration tests: run TestSoak (make soak)",
	"WALPOST_SOAK_SEED":        "integration tests: TestSoak's seed",
	"WALPOST_NEMESIS_SEEDS":    "integration tests: TestNemesis's seeds",
	"WALPOST_NEMESIS_DURATION": "integration tests: TestNemesis's fault phase",
}

// allowedPrefixes are prefixes of WALPOST_* variables that are not config
// keys, each with the reason.
var allowedPrefixes = map[string]string{
	"WALPOST_STACK_": "the local stack (scripts/stack.sh) reads them and writes them to .stack/env",
}

// checkEnvironment refuses a WALPOST_* variable of env (KEY=VALUE
// entries) that is neither a config key's nor allowed, naming the closest
// key: a misspelled variable must not leave its key at the default.
func checkEnvironment(env []string) error {
	known := map[string]bool{}
	for _, k := range Keys() {
		known[k.Env] = true
	}
	var errs []error
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "WALPOST_") || known[name] || allowedVariables[name] != "" {
			continue
		}
		allowed := false
		for p := range allowedPrefixes {
			allowed = allowed || strings.HasPrefix(name, p)
		}
		if allowed {
			continue
		}
		k := closestKey(name)
		errs = append(errs, fmt.Errorf("invalid config: unknown environment variable %s=%q: did you mean %s (%s)? A key's variable is WALPOST_ and the upper-cased key with _ for . (walpost config --reference lists them); rename or unset %s",
			name, redact.String(value), k.Env, k.Key, name))
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errors.Join(errs...)
}

// closestKey is the key whose variable is nearest to name (edit distance;
// the first in declaration order on a tie).
func closestKey(name string) Key {
	keys := Keys()
	best, bestD := keys[0], -1
	for _, k := range keys {
		if d := editDistance(name, k.Env); bestD < 0 || d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b (bytes: variable
// names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// checkTypes refuses a value given as text (environment, flag or file)
// that does not parse as its key's type, naming the key, its variable, the
// value, what is allowed and where the value came from. Values of the
// file's own types (a YAML number for an int) are left to the decoder.
func checkTypes(v *viper.Viper, fs *pflag.FlagSet) error {
	var errs []error
	for _, k := range Keys() {
		s, ok := v.Get(k.Key).(string)
		if !ok {
			continue
		}
		allowed := ""
		switch {
		case k.Type == reflect.TypeOf(time.Duration(0)):
			if _, err := time.ParseDuration(s); err != nil {
				allowed = `a duration with a unit, e.g. "200ms", "10s" or "1m"`
			}
		case k.Type.Kind() == reflect.Bool:
			if _, err := strconv.ParseBool(s); err != nil {
				allowed = "true or false"
			}
		case k.Type.Kind() == reflect.Int, k.Type.Kind() == reflect.Int64:
			if _, err := strconv.ParseInt(s, 10, 64); err != nil {
				allowed = "an integer, e.g. " + k.Default
			}
		}
		if allowed != "" {
			errs = append(errs, &Error{Key: k.Key, Value: s, Allowed: allowed, Source: source(k, fs)})
		}
	}
	return errors.Join(errs...)
}

// source says where the value of k came from, by viper's precedence.
func source(k Key, fs *pflag.FlagSet) string {
	if fs != nil {
		for flag, key := range flagKeys {
			if f := fs.Lookup(flag); key == k.Key && f != nil && f.Changed {
				return "flag --" + flag
			}
		}
	}
	if _, ok := os.LookupEnv(k.Env); ok {
		return "environment"
	}
	if fs != nil {
		if f := fs.Lookup("config"); f != nil && f.Value.String() != "" {
			return "config file " + f.Value.String()
		}
	}
	return ""
}
