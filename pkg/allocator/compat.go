package allocator

import "time"

// Held is AttachmentRecords (its former name, until its callers move).
func Held(tx Store, containerID, ifname string) ([]*Record, error) {
	return AttachmentRecords(tx, containerID, ifname)
}

// ReleaseVanishedHostLocal is ReleaseHostLocalGone (its former name, until
// its callers move).
func ReleaseVanishedHostLocal(tx Store, dir, by string, now time.Time) ([]*Record, error) {
	return ReleaseHostLocalGone(tx, dir, by, now)
}
