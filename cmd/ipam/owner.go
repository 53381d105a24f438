package main

import (
	"strings"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// attachmentOf is the attachment the runtime names (CNI_CONTAINERID, CNI_IFNAME).
func attachmentOf(args *skel.CmdArgs) allocator.Attachment {
	return allocator.Attachment{ContainerID: args.ContainerID, IfName: args.IfName}
}

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
// the node: its directory's identity (device, inode, file handle), whether
// it existed and the namespace it named (allocator.NetnsWitness; a stat and
// a file handle of the directory, one lstat of the netns, which is not
// opened). "The netns is gone" is trusted only from a directory with that
// identity, and only while nothing holds that namespace.
func netnsWitness(netns string) allocator.NetnsWitness {
	return allocator.WitnessNetns(netns)
}
