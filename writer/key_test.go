package writer

import (
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// parseUUID returns the 16 bytes of a canonical UUID text.
func parseUUID(t *testing.T, s string) []byte {
	t.Helper()
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' || strings.ToLower(s) != s {
		t.Fatalf("%q is not a canonical lower-case UUID", s)
	}
	b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNewKeyIsTimeOrderedUUIDv7(t *testing.T) {
	before := time.Now().UnixMilli()
	keys := make([]string, 2000)
	for i := range keys {
		keys[i] = NewKey()
	}
	after := time.Now().UnixMilli()
	for i, k := range keys {
		b := parseUUID(t, k)
		if b[6]>>4 != 7 || b[8]>>6 != 2 {
			t.Fatalf("key %s: version %d variant %b, want version 7, RFC 9562 variant", k, b[6]>>4, b[8]>>6)
		}
		ms := int64(binary.BigEndian.Uint64(append([]byte{0, 0}, b[:6]...)))
		if ms < before || ms > after {
			t.Fatalf("key %s carries time %d ms, outside [%d, %d]", k, ms, before, after)
		}
		if i > 0 && keys[i-1] >= k {
			t.Fatalf("key %d %s does not sort after key %d %s", i, k, i-1, keys[i-1])
		}
	}
}

// uuidv5 is RFC 9562's name-based UUID with SHA-1, written out.
func uuidv5(ns []byte, name string) []byte {
	h := sha1.Sum(append(slices.Clone(ns), name...))
	u := h[:16]
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	return u
}

func TestDeriveKeyIsUUIDv5OfEntityAndVersion(t *testing.T) {
	urlNS, _ := hex.DecodeString("6ba7b8119dad11d180b400c04fd430c8") // RFC 9562, NameSpace_URL
	ns := uuidv5(urlNS, "https://github.com/walpost/walpost/writer")
	if got := parseUUID(t, KeyNamespace.String()); !slices.Equal(got, ns) {
		t.Fatalf("KeyNamespace = %s, want the UUIDv5 of the package URL %x", KeyNamespace, ns)
	}
	for _, tc := range []struct {
		entity  string
		version uint64
	}{{"account/a1/debit", 1}, {"account/a1/debit", 2}, {"", 0}, {"order/ü", 18446744073709551615}} {
		k := DeriveKey(tc.entity, tc.version)
		if want := uuidv5(ns, tc.entity+"@"+strconv.FormatUint(tc.version, 10)); !slices.Equal(parseUUID(t, k), want) {
			t.Fatalf("DeriveKey(%q, %d) = %s, want %x", tc.entity, tc.version, k, want)
		}
		if k != DeriveKey(tc.entity, tc.version) {
			t.Fatalf("DeriveKey(%q, %d) is not deterministic", tc.entity, tc.version)
		}
	}
	if DeriveKey("account/a1", 12) == DeriveKey("account/a11", 2) || DeriveKey("a", 1) == DeriveKey("b", 1) {
		t.Fatal("different natural keys gave one key")
	}
}
