package daemon

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// planStores joins a store's error class with reclaim.ShouldRebuild: only an
// unreadable store is rebuilt, never one with an environment error; a dry
// run rebuilds nothing and leaves plugins' stale temporary stores.
func TestPlanStores(t *testing.T) {
	unreadable := fmt.Errorf("open store: %w", store.ErrUnreadable)
	erofs := &store.IOError{Op: "open", Path: "x.db", Err: syscall.EROFS}
	complete := reclaim.CRIView{Complete: true}
	cases := []struct {
		name    string
		err     error
		cri     reclaim.CRIView
		dryRun  bool
		rebuild bool
	}{
		{"unreadable, complete CRI answer", unreadable, complete, false, true},
		{"unreadable, incomplete CRI answer", unreadable, reclaim.CRIView{Why: "x"}, false, false},
		{"unreadable, dry run", unreadable, complete, true, false},
		{"environment error", erofs, complete, false, false},
		{"readable", nil, complete, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := &SweepReport{DryRun: tc.dryRun, CRI: tc.cri, Networks: []*NetworkReport{{NetworkObservation: NetworkObservation{Network: testNet, ReadErr: tc.err}}}}
			planStores(rep)
			if got := rep.Networks[0].rebuild; got != tc.rebuild || rep.cleanTemp == tc.dryRun {
				t.Errorf("rebuild %v cleanTemp %v, want %v %v", got, rep.cleanTemp, tc.rebuild, !tc.dryRun)
			}
		})
	}
}
