package replication

import "syscall"

func setRcvLowat(fd uintptr, v int) error {
	return syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, v)
}
