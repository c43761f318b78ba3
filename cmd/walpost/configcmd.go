package main

import (
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/spf13/cobra"
)

func init() { extraCommands = append(extraCommands, newConfigCommand) }

func newConfigCommand() *cobra.Command {
	var reference bool
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Print the effective configuration (secrets redacted), or the reference table",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if reference {
				writeReference(cmd.OutOrStdout())
				return nil
			}
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			writeEffective(cmd.OutOrStdout(), cfg)
			return nil
		},
	}
	cmd.Flags().BoolVar(&reference, "reference", false, "print the Markdown table of every key, its variable, default and meaning")
	return cmd
}

// writeReference prints the configuration table the README carries.
func writeReference(w io.Writer) {
	fmt.Fprintln(w, "| key | environment variable | default | meaning |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, k := range configKeys() {
		fmt.Fprintf(w, "| `%s` | `%s` | `%s` | %s |\n", k.Key, k.Env, k.Default, k.Doc)
	}
}

func writeEffective(w io.Writer, cfg *Config) {
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
			fmt.Fprintf(w, "%s = %s\n", key, Redact(val))
		}
	}
	walk(reflect.ValueOf(*cfg), "")
}
