package replication

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// plainOnly is a listener that refuses TLS ('N' to an SSLRequest) and
// counts the plaintext startup messages it gets, then hangs up.
func plainOnly(t *testing.T) (addr string, plaintext *atomic.Int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	plaintext = new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				for {
					hdr := make([]byte, 8)
					if _, err := io.ReadFull(c, hdr); err != nil {
						return
					}
					if binary.BigEndian.Uint32(hdr[4:]) == 80877103 { // SSLRequest
						_, _ = c.Write([]byte{'N'})
						continue
					}
					plaintext.Add(1)
					return
				}
			}(c)
		}
	}()
	return ln.Addr().String(), plaintext
}

// TestReadStandbySlotsKeepsEachHostsFallbacks: with sslmode=prefer every
// host of a multi-host URL is tried with TLS and then in plaintext, as
// pgx connects to it; a host never gets only the first host's TLS setting
// (servers without TLS would all look unreachable).
func TestReadStandbySlotsKeepsEachHostsFallbacks(t *testing.T) {
	a, pa := plainOnly(t)
	b, pb := plainOnly(t)
	ha, porta, _ := net.SplitHostPort(a)
	_, portb, _ := net.SplitHostPort(b)
	url := fmt.Sprintf("postgres://u:p@%s:%s,%s:%s/db?sslmode=prefer&connect_timeout=2", ha, porta, ha, portb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := ReadStandbySlots(ctx, url, "walpost")
	if err != nil {
		t.Fatal(err)
	}
	if pa.Load() == 0 || pb.Load() == 0 {
		t.Errorf("plaintext attempts: %d to the first host, %d to the second; want each host tried in plaintext after TLS was refused", pa.Load(), pb.Load())
	}
	if len(got) != 2 {
		t.Fatalf("%d hosts reported, want 2 (each unreachable: the fakes hang up): %+v", len(got), got)
	}
	for _, s := range got {
		if s.State != "unreachable" || s.Protected() {
			t.Errorf("%s: %s, want unreachable", s.Standby, s.State)
		}
	}
}
