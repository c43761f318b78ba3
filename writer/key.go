package writer

import (
	"strconv"

	"github.com/google/uuid"
)

// KeyNamespace is the UUIDv5 namespace of DeriveKey: the UUIDv5 of the URL
// "https://github.com/walpost/walpost/writer" in the RFC 9562 URL
// namespace (6ba7b811-9dad-11d1-80b4-00c04fd430c8).
var KeyNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/walpost/walpost/writer"))

// NewKey returns a new idempotency key: a UUIDv7 in its canonical text form
// (36 characters, lower case). Its first 48 bits are the Unix time in
// milliseconds, and keys made later in one process sort after earlier ones
// (as text too). Make it before the transaction and reuse it on every retry
// of the same work; a key made afresh per attempt is a second event.
func NewKey() string {
	// NewV7 fails only if crypto/rand does, which since Go 1.24 never
	// returns an error.
	return uuid.Must(uuid.NewV7()).String()
}

// DeriveKey returns the idempotency key of version of entity: the UUIDv5
// (RFC 9562, SHA-1) in KeyNamespace of the name entity + "@" + version in
// decimal, in canonical text form. The same arguments give the same key in
// every process, so a retry that recomputes it writes no second event.
// Name the kind of event in entity ("account/a1/debit") when one entity
// version emits more than one event, and never reuse a version for
// different content: one key is one event.
func DeriveKey(entity string, version uint64) string {
	return uuid.NewSHA1(KeyNamespace, []byte(entity+"@"+strconv.FormatUint(version, 10))).String()
}
