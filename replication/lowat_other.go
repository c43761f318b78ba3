//go:build !linux

package replication

import "errors"

func setRcvLowat(uintptr, int) error {
	return errors.New("SO_RCVLOWAT batching is implemented on Linux only")
}
