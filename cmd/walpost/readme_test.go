package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/walpost/walpost/config"
)

// TestREADMEConfigTable: the README's configuration table is exactly what
// the config struct declares (a key missing from either side fails).
func TestREADMEConfigTable(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "<!-- config-table")
	end := strings.Index(s, "<!-- end config-table -->")
	if start < 0 || end < 0 {
		t.Fatal("README has no config-table markers")
	}
	start += strings.Index(s[start:], "\n") + 1
	var want bytes.Buffer
	config.WriteReference(&want)
	if got := s[start:end]; got != want.String() {
		t.Fatalf("README config table is stale; regenerate it with `walpost config --reference`.\nREADME:\n%s\nstruct:\n%s", got, want.String())
	}
}
