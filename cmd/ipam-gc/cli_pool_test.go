package main

import (
	"math/big"
	"strings"
	"testing"

	"github.com/hostlease/hostlease/pkg/daemon"
)

// A /64 (and any range too large for a float64 to count in ones) prints its
// size and free count exactly, and the free count moves with every address
// the real plugin hands out, in the table and in JSON.
func TestLargeIPv6PoolSizeExact(t *testing.T) {
	dataDir := t.TempDir()
	n := ipamNet{name: "v6", dataDir: dataDir, rangeSets: subnets("fd00:64::/64", "fd00:48::/48")}
	two := func(e uint) *big.Int { return new(big.Int).Lsh(big.NewInt(1), e) }
	// host-local's defaults: the range starts after the network address and
	// ends at the last address; the gateway (the first one) is not allocatable.
	size64 := new(big.Int).Sub(two(64), big.NewInt(2))
	size48 := new(big.Int).Sub(two(80), big.NewInt(2))
	for taken := int64(1); taken <= 3; taken++ {
		add(t, n, "sandbox-"+string(rune('a'+taken)))
		free64 := new(big.Int).Sub(size64, big.NewInt(taken))
		free48 := new(big.Int).Sub(size48, big.NewInt(taken))

		r := gcExec(t, "status", "--data-dir", dataDir)
		if r.code != 0 {
			t.Fatalf("status: %s", r)
		}
		rows := assertAligned(t, r.stdout, 2)
		if rows[0][3] != size64.String() || rows[0][5] != free64.String() || rows[1][3] != size48.String() || rows[1][5] != free48.String() {
			t.Errorf("after %d ADDs: status sizes/free = %s/%s and %s/%s, want %s/%s and %s/%s", taken,
				rows[0][3], rows[0][5], rows[1][3], rows[1][5], size64, free64, size48, free48)
		}

		r = gcExec(t, "status", "--data-dir", dataDir, "-o", "json")
		pools, err := daemon.DecodeRows[daemon.PoolRow]([]byte(r.stdout))
		if err != nil || len(pools) != 2 {
			t.Fatalf("status -o json: %v\n%s", err, r)
		}
		for i, want := range [][2]*big.Int{{size64, free64}, {size48, free48}} {
			if got := pools[i].Size; got != want[0].String() {
				t.Errorf("status -o json pool %d size %s, want %s", i, got, want[0])
			}
			if got := pools[i].Free; got != want[1].String() {
				t.Errorf("status -o json pool %d free %s, want %s", i, got, want[1])
			}
		}
		// Counts too large for common JSON tools travel as strings.
		if strings.Contains(r.stdout, "e+") || !strings.Contains(r.stdout, `"size": "`+size64.String()+`"`) {
			t.Errorf("status -o json does not print the /64's size as a string:\n%s", r.stdout)
		}
	}
}
