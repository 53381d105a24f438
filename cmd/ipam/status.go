package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// cmdStatus reports whether ADD can be served: code 50 when a range set has no
// free address or the store is waiting to be rebuilt. containerd 2.x turns a
// STATUS error into NetworkReady=false for the node, so ipam
// "failStatusOnExhaustion": false turns this off.
func cmdStatus(args *skel.CmdArgs) error {
	c, err := allocator.LoadConfig(args.StdinData, args.Args)
	if err != nil {
		return err
	}
	if c.Marker || !c.FailStatusOnExhaustion || !storeExists(c) {
		return nil
	}
	var full []int
	s, err := openStore(c, false, true)
	if err == nil {
		err = s.View(func(tx *allocator.Tx) error {
			full = allocator.FullRangeSets(tx, c.RangeSets)
			return nil
		})
		s.Close()
	}
	if errors.Is(err, allocator.ErrStoreUnreadable) {
		// Damage found at open or while reading: ADD cannot be served either way.
		return types.NewError(allocator.ErrStatusUnavailable, fmt.Sprintf("network %s: %v; waiting for hostlease-gc to rebuild it", c.Network, err), "")
	}
	if err != nil {
		return storeError(c, err)
	}
	if len(full) == 0 {
		return nil
	}
	var parts []string
	for _, i := range full {
		parts = append(parts, fmt.Sprintf("range set %d", i))
	}
	return types.NewError(allocator.ErrStatusUnavailable,
		fmt.Sprintf("network %s: no free address in %s; ADD will fail until addresses are released", c.Network, strings.Join(parts, ", ")), "")
}
