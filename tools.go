//go:build tools

// Package tools pins the versions of the development tools the Makefile runs.
package tools

import (
	_ "gotest.tools/gotestsum"
	_ "honnef.co/go/tools/cmd/staticcheck"
)
