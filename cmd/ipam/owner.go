package main

import (
	"strings"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// ownerOf reads the attachment and, when the runtime passed them in CNI_ARGS,
// the pod's namespace, name and UID.
func ownerOf(args *skel.CmdArgs) allocator.Owner {
	o := allocator.Owner{ContainerID: args.ContainerID, IfName: args.IfName, Netns: args.Netns}
	for kv := range strings.SplitSeq(args.Args, ";") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "K8S_POD_NAMESPACE":
			o.PodNamespace = v
		case "K8S_POD_NAME":
			o.PodName = v
		case "K8S_POD_UID":
			o.PodUID = v
		}
	}
	return o
}

// netnsWitness is what this ADD saw of CNI_NETNS, in the runtime's view of
// the node: its directory's identity and whether it existed
// (allocator.NetnsWitness; one stat and one lstat, the netns is not
// opened). The daemon trusts "the netns is gone" only from a --netns-dir
// with that identity.
func netnsWitness(netns string) allocator.NetnsWitness {
	return allocator.WitnessNetns(netns)
}
