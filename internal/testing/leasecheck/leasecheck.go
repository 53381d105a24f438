// Package leasecheck judges, from outside the plugin processes, whether an
// address was ever held by two owners at once, and whether an acknowledged
// ADD was forgotten. Tests that run many plugin processes concurrently book
// every holding here and ask for the duplicates and, at the end, the losses.
//
// A holding is timed by the test around the processes: its ADD ran from
// AddStart to AddDone (the reservation committed somewhere in between) and
// its DEL started at DelStart (the release commits after that; zero: not
// released). Two holdings of one address are a duplicate when both ADDs had
// returned before either DEL started: whatever the order of the commits inside
// those windows, both owners held the address at once. Holdings whose windows
// touch are not judged: a DEL that committed and a concurrent ADD that got the
// address before the DEL process exited is correct.
package leasecheck

import (
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Holding is one owner's hold on one or more addresses.
type Holding struct {
	Owner             string
	AddStart, AddDone time.Time
	DelStart          time.Time // zero: not released
}

// Duplicate is two holdings of IP that certainly overlapped: both ADDs had
// returned by Both, before either DEL started.
type Duplicate struct {
	IP   netip.Addr
	A, B *Holding
	Both time.Time
}

// Overlapped reports whether x and y certainly held their address at the
// same time, and the moment by which both ADDs had returned.
func Overlapped(x, y *Holding) (bool, time.Time) {
	bothAdded := x.AddDone
	if y.AddDone.After(bothAdded) {
		bothAdded = y.AddDone
	}
	firstDel := x.DelStart
	if firstDel.IsZero() || (!y.DelStart.IsZero() && y.DelStart.Before(firstDel)) {
		firstDel = y.DelStart
	}
	return firstDel.IsZero() || bothAdded.Before(firstDel), bothAdded
}

// Book records every holding of every address. Its methods may be called
// from many goroutines.
type Book struct {
	mu   sync.Mutex
	byIP map[netip.Addr][]*Holding
}

// NewBook returns an empty book.
func NewBook() *Book { return &Book{byIP: map[netip.Addr][]*Holding{}} }

// Hold books h as a holder of each of ips.
func (b *Book) Hold(h *Holding, ips ...netip.Addr) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ip := range ips {
		b.byIP[ip] = append(b.byIP[ip], h)
	}
}

// Releasing marks now as the moment h's DEL process starts. Call it before
// starting the DEL.
func (b *Book) Releasing(h *Holding) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h.DelStart = time.Now()
}

// Duplicates lists every pair of holdings of one address that certainly
// overlapped, ordered by address and then by the order they were booked.
func (b *Book) Duplicates() []Duplicate {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Duplicate
	for ip, hs := range b.byIP {
		for i, x := range hs {
			for _, y := range hs[i+1:] {
				if ok, both := Overlapped(x, y); ok {
					out = append(out, Duplicate{IP: ip, A: x, B: y, Both: both})
				}
			}
		}
	}
	slices.SortStableFunc(out, func(p, q Duplicate) int { return p.IP.Compare(q.IP) })
	return out
}

// Loss is an acknowledged ADD the store forgot: h's ADD returned IP and h was
// never released, yet the final state does not hold IP for h's owner.
type Loss struct {
	IP netip.Addr
	H  *Holding
}

// Lost lists, ordered by address, every address of a holding never released
// that holds(ip, owner) says is not held by that owner at the end. Call it
// once every process has exited, with the store's final records.
func (b *Book) Lost(holds func(ip netip.Addr, owner string) bool) []Loss {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Loss
	for ip, hs := range b.byIP {
		for _, h := range hs {
			if h.DelStart.IsZero() && !holds(ip, h.Owner) {
				out = append(out, Loss{IP: ip, H: h})
			}
		}
	}
	slices.SortStableFunc(out, func(p, q Loss) int { return p.IP.Compare(q.IP) })
	return out
}
