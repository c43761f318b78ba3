package writer

import (
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // UUIDv5 is defined over SHA-1 (RFC 9562 §5.5); it names, it does not protect
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"sync"
	"time"
)

// UUID is a 128-bit UUID (RFC 9562); String gives its canonical text form.
type UUID [16]byte

// String is the canonical text form: 36 characters, lower case.
func (u UUID) String() string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// nameSpaceURL is RFC 9562's URL namespace, 6ba7b811-9dad-11d1-80b4-00c04fd430c8.
var nameSpaceURL = UUID{0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}

// KeyNamespace is the UUIDv5 namespace of DeriveKey: the UUIDv5 of the URL
// "https://github.com/walpost/walpost/writer" in the RFC 9562 URL
// namespace (6ba7b811-9dad-11d1-80b4-00c04fd430c8).
var KeyNamespace = uuidV5(nameSpaceURL, []byte("https://github.com/walpost/walpost/writer"))

// uuidV5 is the name-based UUID of name in ns (RFC 9562 §5.5): SHA-1 of
// the namespace's bytes and the name, version 5, variant 10.
func uuidV5(ns UUID, name []byte) UUID {
	h := sha1.New() //nolint:gosec // see the import
	h.Write(ns[:])
	h.Write(name)
	var u UUID
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	return u
}

// v7 keeps NewKey's keys ordered within the process: the last key's
// millisecond and its 12-bit counter (RFC 9562 §6.2, method 1).
var v7 struct {
	sync.Mutex
	ms  uint64
	seq uint16
}

// NewKey returns a new idempotency key: a UUIDv7 in its canonical text form
// (36 characters, lower case). Its first 48 bits are the Unix time in
// milliseconds, the next 12 a counter within the millisecond, the last 62
// random; keys made later in one process sort after earlier ones (as text
// too). Make it before the transaction and reuse it on every retry of the
// same work; a key made afresh per attempt is a second event.
func NewKey() string {
	ms := uint64(time.Now().UnixMilli())
	v7.Lock()
	if ms <= v7.ms {
		// The same millisecond (or a clock that went back): count on,
		// and borrow the next millisecond when the counter is spent.
		ms = v7.ms
		v7.seq++
		if v7.seq > 0x0fff {
			ms++
			v7.seq = 0
		}
	} else {
		v7.seq = 0
	}
	v7.ms = ms
	seq := v7.seq
	v7.Unlock()
	var u UUID
	binary.BigEndian.PutUint64(u[0:8], ms<<16|0x7000|uint64(seq))
	_, _ = rand.Read(u[8:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	u[8] = u[8]&0x3f | 0x80
	return u.String()
}

// DeriveKey returns the idempotency key of version of entity: the UUIDv5
// (RFC 9562, SHA-1) in KeyNamespace of the name entity + "@" + version in
// decimal, in canonical text form. The same arguments give the same key in
// every process, so a retry that recomputes it writes no second event.
// Name the kind of event in entity ("account/a1/debit") when one entity
// version emits more than one event, and never reuse a version for
// different content: one key is one event.
func DeriveKey(entity string, version uint64) string {
	return uuidV5(KeyNamespace, []byte(entity+"@"+strconv.FormatUint(version, 10))).String()
}
