package config

import (
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/walpost/walpost/internal/redact"
)

// WriteReference prints the configuration table the README carries.
func WriteReference(w io.Writer) {
	fmt.Fprintln(w, "| key | environment variable | default | meaning |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, k := range Keys() {
		fmt.Fprintf(w, "| `%s` | `%s` | `%s` | %s |\n", k.Key, k.Env, k.Default, k.Doc)
	}
}

// WriteEffective prints every key = value of cfg, passwords hidden.
func WriteEffective(w io.Writer, cfg *Config) {
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			key := t.Field(i).Tag.Get("mapstructure")
			if prefix != "" {
				key = prefix + "." + key
			}
			fv := v.Field(i)
			if fv.Kind() == reflect.Struct {
				walk(fv, key)
				continue
			}
			val := fmt.Sprint(fv.Interface())
			if fv.Kind() == reflect.Slice {
				parts := make([]string, fv.Len())
				for j := range parts {
					parts[j] = fmt.Sprint(fv.Index(j).Interface())
				}
				val = strings.Join(parts, ",")
			}
			if strings.Contains(key, "password") && val != "" {
				val = "xxxxx"
			}
			fmt.Fprintf(w, "%s = %s\n", key, redact.String(val))
		}
	}
	walk(reflect.ValueOf(*cfg), "")
}
