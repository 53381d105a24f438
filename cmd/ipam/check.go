package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// cmdCheck verifies that the attachment holds its reservations and that they
// agree with prevResult: each reserved address appears in it, and every address
// of prevResult inside our range sets is one we reserved for this attachment.
func cmdCheck(args *skel.CmdArgs) error {
	c, err := loadConfig(args, "CHECK")
	if err != nil {
		return err
	}
	if c.Marker {
		return markerCheck(args, c)
	}
	if !storeExists(c) {
		return types.NewError(types.ErrUnknownContainer,
			fmt.Sprintf("no allocation for container %s ifname %s: network %s has no store", args.ContainerID, args.IfName, c.Network), "")
	}
	recs, notes, err := readAttachment(c, args)
	if err != nil {
		return err
	}
	log := func() *slog.Logger {
		return logWith("verb", "CHECK", "network", c.Network, "containerID", args.ContainerID, "ifname", args.IfName)
	}
	notes.log(log)
	if len(recs) == 0 && len(notes.damaged) > 0 {
		// The owner index lists a record for this attachment that does
		// not decode: it cannot be verified, and it is not the runtime's
		// fault. It stays reserved; the damage is reported.
		log().Warn("this attachment's record is damaged and cannot be checked; it stays reserved (hostlease-gc release IP frees it)")
		return nil
	}
	if len(recs) == 0 {
		return types.NewError(types.ErrUnknownContainer,
			fmt.Sprintf("no allocation for container %s ifname %s in network %s", args.ContainerID, args.IfName, c.Network), "")
	}
	prev, err := prevResult(args.StdinData)
	if err != nil || prev == nil {
		return err
	}
	inPrev := map[netip.Addr]bool{}
	for _, ipc := range prev.IPs {
		if a, ok := netip.AddrFromSlice(ipc.Address.IP); ok {
			inPrev[a.Unmap()] = true
		}
	}
	ours := map[netip.Addr]bool{}
	for _, d := range notes.damaged {
		ours[d.IP] = true // listed for this attachment; its record cannot be read
	}
	for _, r := range recs {
		ours[r.IP] = true
		if !inPrev[r.IP] {
			return types.NewError(types.ErrInternal,
				fmt.Sprintf("address %s reserved for container %s ifname %s is missing from prevResult", r.IP, args.ContainerID, args.IfName), "")
		}
	}
	for ip := range inPrev {
		if ours[ip] {
			continue
		}
		for _, set := range c.RangeSets {
			for _, r := range set.Ranges {
				if r.Subnet.Contains(ip) {
					return types.NewError(types.ErrInternal,
						fmt.Sprintf("prevResult holds %s in range set %s, which hostlease did not reserve for this attachment", ip, r.Subnet), "")
				}
			}
		}
	}
	return nil
}

// prevResult decodes the chain's previous result, or nil when there is none.
func prevResult(stdin []byte) (*current.Result, error) {
	conf := &types.NetConf{}
	if err := json.Unmarshal(stdin, conf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "config: "+err.Error(), "")
	}
	if err := version.ParsePrevResult(conf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "prevResult: "+err.Error(), "")
	}
	if conf.PrevResult == nil {
		return nil, nil
	}
	res, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "prevResult: "+err.Error(), "")
	}
	return res, nil
}
