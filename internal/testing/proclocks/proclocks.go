// Package proclocks reads the kernel's table of file locks (/proc/locks), so
// that tests can stop at a known point of a lock protocol: "this process is
// blocked waiting for the flock of that inode" is an order of events, not a
// timing.
package proclocks

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// Lock is one line of /proc/locks for a flock.
type Lock struct {
	PID     int
	Inode   uint64
	Write   bool // WRITE (exclusive) rather than READ (shared)
	Waiting bool // blocked waiting for the lock ("->"), not holding it
}

// Flocks returns every flock the kernel lists (held and waited for).
func Flocks() ([]Lock, error) {
	f, err := os.Open("/proc/locks")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Lock
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 2694 fe:00:5310802 0 EOF", a waiter
		// with "->" after the number.
		fields := strings.Fields(sc.Text())
		l := Lock{}
		if len(fields) > 1 && fields[1] == "->" {
			l.Waiting = true
			fields = append(fields[:1], fields[2:]...)
		}
		if len(fields) < 6 || fields[1] != "FLOCK" {
			continue
		}
		l.Write = fields[3] == "WRITE"
		pid, err := strconv.Atoi(fields[4])
		if err != nil {
			continue
		}
		dev := strings.Split(fields[5], ":")
		ino, err := strconv.ParseUint(dev[len(dev)-1], 10, 64)
		if err != nil {
			continue
		}
		l.PID, l.Inode = pid, ino
		out = append(out, l)
	}
	return out, sc.Err()
}

// Waiting reports whether process pid (any process: pid 0) is blocked
// waiting for a flock of inode ino.
func Waiting(pid int, ino uint64) bool {
	locks, err := Flocks()
	if err != nil {
		return false
	}
	for _, l := range locks {
		if l.Waiting && l.Inode == ino && (pid == 0 || l.PID == pid) {
			return true
		}
	}
	return false
}

// Holding reports whether process pid (any process: pid 0) holds a flock of
// inode ino.
func Holding(pid int, ino uint64) bool {
	locks, err := Flocks()
	if err != nil {
		return false
	}
	for _, l := range locks {
		if !l.Waiting && l.Inode == ino && (pid == 0 || l.PID == pid) {
			return true
		}
	}
	return false
}
