package store

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"net/netip"

	"github.com/hostlease/hostlease/pkg/allocator"
	bolt "go.etcd.io/bbolt"
)

// The taken index is a bitmap of reserved addresses, kept in blocks of
// blockBits consecutive addresses: bucket takenbits maps the key of a block
// (addrKey of its first address, whose low 12 bits are zero) to blockBytes
// bytes, bit i (byte i/8, bit i%8) set when the block's address i is reserved.
// A block with no address reserved has no key. It holds exactly the keys of
// allocs (Put and Delete keep the two in step), and it is what an ADD reads
// to choose an address: at 99.9 % of a /16 an ADD steps over ~1 000 reserved
// addresses, which are 16 words of one block here, and a pool of up to 4 096
// addresses is one value small enough for bbolt to keep inline.
const (
	blockBits  = 4096
	blockBytes = blockBits / 8
)

// blockOf returns the key of the block holding ip and ip's offset in it.
func blockOf(ip netip.Addr) ([]byte, int) {
	k := addrKey(ip)
	n := len(k)
	off := int(k[n-2]&0x0f)<<8 | int(k[n-1])
	k[n-2] &^= 0x0f
	k[n-1] = 0
	return k, off
}

// blockAddr is the address at offset off of the block with key k.
func blockAddr(k []byte, off int) netip.Addr {
	b := bytes.Clone(k)
	n := len(b)
	b[n-2] |= byte(off >> 8)
	b[n-1] = byte(off)
	a, _ := keyAddr(b)
	return a
}

// nextBlock is the key of the block after k, or false past the last address of
// the family.
func nextBlock(k []byte) ([]byte, bool) {
	b := bytes.Clone(k)
	carry := 0x10 // blockBits in the second-to-last byte
	for i := len(b) - 2; i >= 1 && carry > 0; i-- {
		v := int(b[i]) + carry
		b[i], carry = byte(v), v>>8
	}
	return b, carry == 0
}

// bitSet reports whether bit off of block bm is set. A block of the wrong
// length (damage) reads as clear where it has no byte: an address chosen from
// it is checked against the records anyway (allocator.Allocate), and a repair
// rewrites the block (compareIndexes).
func bitSet(bm []byte, off int) bool { return off/8 < len(bm) && bm[off/8]&(1<<(off%8)) != 0 }

// nextBit returns the first offset >= off whose bit equals want, or blockBits.
// A nil block has no bit set.
func nextBit(bm []byte, off int, want bool) int {
	if bm == nil {
		if want {
			return blockBits
		}
		return off
	}
	for w := off / 64; w < blockBits/64; w++ {
		var x uint64
		if (w+1)*8 <= len(bm) {
			x = binary.LittleEndian.Uint64(bm[w*8:])
		} else {
			var word [8]byte
			if w*8 < len(bm) {
				copy(word[:], bm[w*8:])
			}
			x = binary.LittleEndian.Uint64(word[:])
		}
		if !want {
			x = ^x
		}
		if w == off/64 {
			x &= ^uint64(0) << (off % 64)
		}
		if x != 0 {
			return w*64 + bits.TrailingZeros64(x)
		}
	}
	return blockBits
}

// takenBits reads and writes the bitmap through one bucket of a transaction.
type takenBits struct{ b *bolt.Bucket }

func (t takenBits) has(ip netip.Addr) bool {
	k, off := blockOf(ip)
	return bitSet(t.b.Get(k), off)
}

// set marks ip reserved (on) or free.
func (t takenBits) set(ip netip.Addr, on bool) error {
	k, off := blockOf(ip)
	old := t.b.Get(k)
	if bitSet(old, off) == on {
		return nil
	}
	bm := make([]byte, blockBytes)
	copy(bm, old) // old lives in the mmap: never write to it
	if on {
		bm[off/8] |= 1 << (off % 8)
	} else {
		bm[off/8] &^= 1 << (off % 8)
		if nextBit(bm, 0, true) == blockBits {
			return t.b.Delete(k)
		}
	}
	return t.b.Put(k, bm)
}

// count is the number of reserved addresses.
func (t takenBits) count() int {
	n := 0
	_ = t.b.ForEach(func(_, v []byte) error {
		for w := 0; w+8 <= len(v); w += 8 {
			n += bits.OnesCount64(binary.LittleEndian.Uint64(v[w:]))
		}
		return nil
	})
	return n
}

// FirstFree returns the first address in [from, to] that is neither reserved
// nor gw, reading whole words of the bitmap.
func (t takenBits) FirstFree(from, to, gw netip.Addr) (netip.Addr, bool) {
	if !from.IsValid() || from.BitLen() != to.BitLen() || to.Less(from) {
		return netip.Addr{}, false
	}
	k, off := blockOf(from)
	for {
		bm := t.b.Get(k)
		for off < blockBits {
			o := nextBit(bm, off, false)
			if o == blockBits {
				break
			}
			a := blockAddr(k, o)
			if to.Less(a) {
				return netip.Addr{}, false
			}
			if a != gw {
				return a, true
			}
			off = o + 1
		}
		var ok bool
		if k, ok = nextBlock(k); !ok || to.Less(blockAddr(k, 0)) {
			return netip.Addr{}, false
		}
		off = 0
	}
}

// iter walks the reserved addresses in address order.
func (t takenBits) iter() allocator.TakenIter { return &bitsIter{c: t.b.Cursor()} }

// bitsIter is a TakenIter over the bitmap's set bits.
type bitsIter struct {
	c      *bolt.Cursor
	k, bm  []byte // the block of the last address returned (valid for the transaction)
	off    int
	hasCur bool
}

func (it *bitsIter) Seek(from netip.Addr) (netip.Addr, bool) {
	want, off := blockOf(from)
	k, v := it.c.Seek(want)
	if !bytes.Equal(k, want) {
		off = 0
	}
	return it.scan(k, v, off)
}

func (it *bitsIter) Next() (netip.Addr, bool) {
	if !it.hasCur {
		return netip.Addr{}, false
	}
	return it.scan(it.k, it.bm, it.off+1)
}

// scan returns the first set bit at or after off in block k, or in the blocks
// after it.
func (it *bitsIter) scan(k, v []byte, off int) (netip.Addr, bool) {
	for k != nil {
		if o := nextBit(v, off, true); o < blockBits {
			it.k, it.bm, it.off, it.hasCur = k, v, o, true
			return blockAddr(k, o), true
		}
		k, v = it.c.Next()
		off = 0
	}
	it.hasCur = false
	return netip.Addr{}, false
}

// FirstFree lets NextFree read the bitmap a word at a time.
func (it *bitsIter) FirstFree(from, to, gw netip.Addr) (netip.Addr, bool) {
	return takenBits{it.c.Bucket()}.FirstFree(from, to, gw)
}
