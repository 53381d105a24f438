package allocator

import "time"

// MarkCommitted marks attachment a's allocations committed (StateCommitted):
// the chain reached its last plugin, so the sandbox's network setup
// succeeded. It returns how many records changed. (Committing the store's
// transaction is Store.Update's business, not this.)
func MarkCommitted(tx Store, a Attachment, now time.Time) (int, error) {
	recs, err := AttachmentRecords(tx, a)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range recs {
		if r.State == StateCommitted {
			continue
		}
		r.State, r.Committed = StateCommitted, now
		if err := tx.Put(r); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
