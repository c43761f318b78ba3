package integration

import "syscall"

// childAttr makes a walpost started by a test get SIGKILL when the test
// binary dies (a panic, -timeout, a killed go test), so an aborted run
// leaves no walpost holding a slot or a port. The signal follows the OS
// thread that started the child; Go keeps its threads unless a goroutine
// exits locked to one, which these tests never do.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
