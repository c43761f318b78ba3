package kafka

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestLz4CompressorFrame(t *testing.T) {
	c, err := newCompressor(kgo.Lz4Compression())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.(*lz4Compressor); !ok {
		t.Fatalf("lz4 uses %T, want *lz4Compressor", c)
	}
	var src bytes.Buffer
	for i := 0; src.Len() < 300<<10; i++ { // several 64 KiB blocks
		fmt.Fprintf(&src, `{"order_id": %d, "customer": "customer-%d", "note": "order %d"}`, i, i%97, i*7)
	}
	for round := 0; round < 2; round++ { // the second use is a pooled writer
		var dst bytes.Buffer
		out, codec := c.Compress(&dst, src.Bytes())
		if codec != kgo.CodecLz4 || out == nil {
			t.Fatalf("codec %d, out nil %v", codec, out == nil)
		}
		if len(out) >= src.Len() {
			t.Fatalf("compressed %d bytes into %d", src.Len(), len(out))
		}
		// LZ4 frame: magic, FLG (bit 2: content checksum), BD (bits 4-6:
		// block size; 4 = 64 KiB).
		if !bytes.Equal(out[:4], []byte{0x04, 0x22, 0x4d, 0x18}) {
			t.Fatalf("no LZ4 frame magic: % x", out[:4])
		}
		if flg, bd := out[4], out[5]; flg&0x04 != 0 || (bd>>4)&7 != 4 {
			t.Fatalf("FLG %#x BD %#x: want no content checksum and 64 KiB blocks", flg, bd)
		}
		back, err := kgo.DefaultDecompressor().Decompress(out, kgo.CodecLz4)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back, src.Bytes()) {
			t.Fatal("round trip changed the batch")
		}
	}
	for _, name := range []string{"none", "gzip", "snappy", "zstd"} {
		cd, _ := codec(name)
		c, err := newCompressor(cd)
		if err != nil {
			t.Fatal(name, err)
		}
		if _, ok := c.(*lz4Compressor); ok {
			t.Fatalf("%s uses the lz4 compressor", name)
		}
	}
}
