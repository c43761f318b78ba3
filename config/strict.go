package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
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

// notKeys are settings users look for that walpost deliberately does not
// have, each with why: the refusal of such a variable or file key says
// so instead of suggesting a neighbour.
var notKeys = map[string]string{
	"kafka.acks":               "acks are fixed at all (-1): walpost's delivery guarantee needs every in-sync replica's ack, so the producer always asks for it (with idempotence); there is no setting",
	"kafka.enable_idempotence": "the producer is always idempotent (at-least-once) or transactional (exactly-once); there is no setting",
	"config":                   "there is no variable for the config file: pass --config FILE",
}

// checkEnvironment refuses a WALPOST_* variable of env (KEY=VALUE
// entries) that is neither a config key's nor allowed, naming the closest
// key when one is close: a misspelled variable must not leave its key at
// the default.
func checkEnvironment(env []string) []error {
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
		head := fmt.Sprintf("invalid config: unknown environment variable %s=%q: ", name, redact.String(value))
		if why, ok := notKeys[strings.ToLower(strings.Replace(strings.TrimPrefix(name, "WALPOST_"), "_", ".", 1))]; ok {
			errs = append(errs, fmt.Errorf("%s%s; unset %s", head, why, name))
			continue
		}
		if k, ok := closestKey(name, func(k Key) string { return k.Env }); ok {
			errs = append(errs, fmt.Errorf("%sdid you mean %s (%s)? A key's variable is WALPOST_ and the upper-cased key with _ for . (walpost config --reference lists them); rename or unset %s",
				head, k.Env, k.Key, name))
			continue
		}
		errs = append(errs, fmt.Errorf("%sno key's variable is close to it. A key's variable is WALPOST_ and the upper-cased key with _ for . (walpost config --reference lists them); unset %s", head, name))
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errs
}

// closestKey is the key whose name (by) is nearest to name (edit
// distance; the first in declaration order on a tie), when it is close:
// at most a third of the name's length (past the WALPOST_ prefix) apart,
// and at least 1, so a typo is caught and an unrelated word is not
// answered with an unrelated key (WALPOST_CONFIG is not
// WALPOST_LOG_LEVEL).
func closestKey(name string, by func(Key) string) (Key, bool) {
	keys := Keys()
	best, bestD := keys[0], -1
	for _, k := range keys {
		if d := editDistance(name, by(k)); bestD < 0 || d < bestD {
			best, bestD = k, d
		}
	}
	limit := max(1, len(strings.TrimPrefix(strings.TrimPrefix(name, "WALPOST_"), "walpost_"))/3)
	return best, bestD <= limit
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

// configExtensions are the file extensions --config reads.
var configExtensions = []string{".yaml", ".yml", ".toml", ".json"}

// readFile reads the config file path into v, refusing an extension it
// cannot tell the format of.
func readFile(v *viper.Viper, path string) error {
	ext := strings.ToLower(filepath.Ext(path))
	if !slices.Contains(configExtensions, ext) {
		what := fmt.Sprintf("the extension %q is not one walpost reads", ext)
		if ext == "" {
			what = "the file has no extension"
		}
		return fmt.Errorf("invalid config: --config %s: %s: name the file *.yaml, *.yml, *.toml or *.json after its format", path, what)
	}
	v.SetConfigFile(path)
	if err := v.ReadInConfig(); err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("invalid config: --config %s: cannot read the file: %w", path, pe.Err)
		}
		return fmt.Errorf("invalid config: --config %s: not valid %s: %w", path, strings.ToUpper(strings.TrimPrefix(ext, ".")), errors.Unwrap(err))
	}
	return nil
}

// checkUnknownKeys refuses the keys of the config file that are no key,
// naming the closest key when one is close.
func checkUnknownKeys(v *viper.Viper, fs *pflag.FlagSet) []error {
	file := configFile(fs)
	if file == "" {
		return nil
	}
	known := map[string]bool{}
	for _, k := range Keys() {
		known[k.Key] = true
	}
	var errs []error
	for _, key := range v.AllKeys() {
		if known[key] {
			continue
		}
		head := fmt.Sprintf("invalid config: unknown key %s in the config file %s: ", key, file)
		if why, ok := notKeys[key]; ok {
			errs = append(errs, fmt.Errorf("%s%s; remove it", head, why))
			continue
		}
		if k, ok := closestKey(key, func(k Key) string { return k.Key }); ok {
			errs = append(errs, fmt.Errorf("%sdid you mean %s (%s)? walpost config --reference lists the keys", head, k.Key, k.Env))
			continue
		}
		errs = append(errs, fmt.Errorf("%sno key is close to it; walpost config --reference lists the keys", head))
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errs
}

// configFile is the --config of fs, or "".
func configFile(fs *pflag.FlagSet) string {
	if fs != nil {
		if f := fs.Lookup("config"); f != nil {
			return f.Value.String()
		}
	}
	return ""
}

// checkTypes refuses a value (environment, flag or file) that is not of
// its key's type, naming the key, its variable, the value, what is allowed
// and where the value came from, and puts the key back to its default so
// the rest of the configuration is still checked.
func checkTypes(v *viper.Viper, fs *pflag.FlagSet) []error {
	var errs []error
	for _, k := range Keys() {
		val := v.Get(k.Key)
		allowed := typeProblem(k, val)
		if allowed == "" {
			continue
		}
		errs = append(errs, &Error{Key: k.Key, Value: showValue(val), Allowed: allowed, Source: source(v, k, fs)})
		switch {
		case k.Default == "(required)", k.Default == "(profile)":
			v.Set(k.Key, "")
		case k.Type.Kind() == reflect.Slice:
			v.Set(k.Key, []string{})
		default:
			v.Set(k.Key, k.Default)
		}
	}
	return errs
}

// typeProblem is what k allows when val is not of its type, else "".
func typeProblem(k Key, val any) string {
	rv := reflect.ValueOf(val)
	isInt := rv.CanInt() || rv.CanUint() || (rv.CanFloat() && rv.Float() == float64(int64(rv.Float())))
	switch {
	case val == nil:
		return ""
	case k.Type == reflect.TypeOf(time.Duration(0)):
		const want = `a duration with a unit, e.g. "200ms", "10s" or "1m"`
		if s, ok := val.(string); ok {
			if _, err := time.ParseDuration(s); err != nil {
				return want
			}
			return ""
		}
		if _, ok := val.(time.Duration); ok {
			return ""
		}
		if rv.CanInt() || rv.CanUint() || rv.CanFloat() {
			return want + ` (a bare number has no unit; quote it with one, e.g. "10s")`
		}
		return want
	case k.Type.Kind() == reflect.Bool:
		if s, ok := val.(string); ok {
			if _, err := strconv.ParseBool(s); err != nil {
				return "true or false"
			}
			return ""
		}
		if _, ok := val.(bool); !ok {
			return "true or false"
		}
	case k.Type.Kind() == reflect.Int, k.Type.Kind() == reflect.Int64:
		if s, ok := val.(string); ok {
			if _, err := strconv.ParseInt(s, 10, 64); err != nil {
				return "an integer, e.g. " + k.Default
			}
			return ""
		}
		if !isInt {
			return "an integer, e.g. " + k.Default
		}
	case k.Type.Kind() == reflect.String:
		if rv.Kind() == reflect.Map || rv.Kind() == reflect.Slice {
			return "a string, not a list or a table"
		}
	case k.Type.Kind() == reflect.Slice:
		if rv.Kind() == reflect.Map {
			return "a list of strings, or one comma-separated string"
		}
		if rv.Kind() == reflect.Slice {
			for i := 0; i < rv.Len(); i++ {
				if e := reflect.ValueOf(rv.Index(i).Interface()); e.Kind() == reflect.Map || e.Kind() == reflect.Slice {
					return "a list of strings, or one comma-separated string"
				}
			}
		}
	}
	return ""
}

// showValue is val as the user wrote it: a scalar as text, a list or a
// table as JSON.
func showValue(val any) string {
	switch reflect.ValueOf(val).Kind() {
	case reflect.Map, reflect.Slice:
		if b, err := json.Marshal(val); err == nil {
			return string(b)
		}
	}
	return fmt.Sprint(val)
}

// keyOf is the Key named key (a zero Key with that name when unknown).
func keyOf(key string) Key {
	for _, k := range Keys() {
		if k.Key == key {
			return k
		}
	}
	return Key{Key: key, Env: envName(key)}
}

// source says where the value of k came from, by viper's precedence:
// "flag --name", "environment", "config file PATH", or "" (the default).
func source(v *viper.Viper, k Key, fs *pflag.FlagSet) string {
	if set, _ := setValues(fs); set != nil {
		if _, ok := set[k.Key]; ok {
			return "flag --set"
		}
	}
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
	if file := configFile(fs); file != "" && v != nil && v.InConfig(k.Key) {
		return "config file " + file
	}
	return ""
}

// normalizeCase writes the enumerated values in their canonical case: one
// rule for every enumeration, the case is not significant (INFO is info,
// scram-sha-512 is SCRAM-SHA-512). A value of no case allowed is left as
// written, for Validate to name.
func (c *Config) normalizeCase() {
	enum := Enumerations()
	for key, p := range map[string]*string{
		"log.level": &c.Log.Level, "log.format": &c.Log.Format, "kafka.compression": &c.Kafka.Compression,
		"kafka.partitioner":    &c.Kafka.Partitioner,
		"kafka.sasl.mechanism": &c.Kafka.SASL.Mechanism, "mapping.profile": &c.Mapping.Profile,
		"mapping.key_format": &c.Mapping.KeyFormat, "mapping.value_format": &c.Mapping.ValueFormat,
		"delivery.mode": &c.Delivery.Mode,
	} {
		for _, v := range enum[key] {
			if strings.EqualFold(*p, v) {
				*p = v
			}
		}
	}
}
