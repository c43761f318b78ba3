//go:build !linux

package integration

import "syscall"

// childAttr: no parent-death signal outside Linux; the tests' cleanups
// still kill what they started.
func childAttr() *syscall.SysProcAttr { return nil }
