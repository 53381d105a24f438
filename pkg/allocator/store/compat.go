package store

import "github.com/hostlease/hostlease/pkg/allocator"

// ByOwner is Records of one attachment, unverified (its former name, until
// its callers move).
func (tx *Tx) ByOwner(containerID, ifname string) ([]*allocator.Record, error) {
	return tx.Records(allocator.Query{Attachment: &allocator.Attachment{ContainerID: containerID, IfName: ifname}})
}
