package daemon

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// This file is the sweep's report stage: it logs what a sweep observed,
// decided and did, and posts Kubernetes Events for reclaims, re-reservations,
// conflicts and refused sweeps (never in a dry run: `leaks` is one). The
// metrics collector (metrics.go) takes the report after it.

// reportSweep logs what concerns the whole sweep rather than one network.
func (s *Sweeper) reportSweep(rep *SweepReport) {
	if rep.storesErr != nil {
		s.Log.Error("cannot list stores", "dataDir", s.Opts.DataDir, "error", rep.storesErr)
	}
	if len(rep.tempRemoved) > 0 || rep.tempErr != nil {
		s.Log.Info("removed stale temporary store files", "files", rep.tempRemoved, "error", rep.tempErr)
	}
	if !rep.CRI.Complete {
		s.Log.Warn("reclaiming nothing this sweep: CRI answer not usable", "why", rep.CRI.Why)
	}
	s.reportNetnsProof(rep)
}

// reportNetnsProof logs the netns proof's state for the whole node, once
// when it changes (never once per network or per sweep: the metrics
// hostlease_netns_dir_verified and hostlease_netns_unverified_records and
// `hostlease-gc leaks` show it at any time).
func (s *Sweeper) reportNetnsProof(rep *SweepReport) {
	st := rep.Netns
	if st.State == "" || st.Key == s.netnsLogged {
		return
	}
	s.netnsLogged = st.Key
	switch {
	case st.Verified:
		s.Log.Info("netns proof on: a sandbox absent from CRI whose netns is gone from --netns-dir is reclaimed at once", "netnsDir", s.Opts.NetnsDir, "why", st.Why)
	case st.Warn():
		s.Log.Warn("netns proof unavailable: --netns-dir is not verified as the runtime's; absent sandboxes wait for the rules without proof (--misses, --grace, --min-age, API veto, guard)",
			"netnsDir", s.Opts.NetnsDir, "state", st.State, "unverifiedRecords", st.Unverified, "why", st.Why)
	default:
		s.Log.Info("netns proof not verified yet: absent sandboxes wait for the rules without proof until a record's netns directory matches --netns-dir",
			"netnsDir", s.Opts.NetnsDir, "state", st.State, "unverifiedRecords", st.Unverified, "why", st.Why)
	}
}

// report logs and posts Events for one network, after its write.
func (s *Sweeper) report(ctx context.Context, rep *SweepReport, nr *NetworkReport) {
	log := s.Log.With("network", nr.Network)
	s.reportStore(log, rep, nr)
	if nr.Snapshot != nil && nr.firstReadErr == nil && !rep.DryRun {
		s.reportPluginReleases(ctx, log, rep, nr)
	}
	if nr.readable() {
		s.reportDecisions(ctx, log, rep, nr)
	}
}

// reportPluginReleases logs, and posts an Event on the pod for, each release
// of a dead sandbox the plugin made since the last sweep (read from the audit
// log: the plugin posts nothing), then records in the store the last audit
// sequence reported. Not in a dry run (`leaks`), which writes nothing: the
// metric still counts them.
//
// Reports are at least once: the store's mark (audit_reported) moves only
// after every Event up to it was posted. An Event that fails is posted again
// at the next sweep (and the mark waits for it); a daemon stopped between
// posting and marking, or with Events still unposted, reports them again
// after its restart (a repeated Event, never a lost one). The log line and
// hostlease_plugin_releases_total count each release once per daemon run.
func (s *Sweeper) reportPluginReleases(ctx context.Context, log *slog.Logger, rep *SweepReport, nr *NetworkReport) {
	st := s.stores[nr.Path]
	if st == nil {
		st = &storeState{}
	}
	evs := nr.Snapshot.PluginReleases
	if len(evs) == 0 && len(st.unposted) == 0 {
		return
	}
	for _, ev := range evs {
		log.Info("the plugin released an address of a sandbox whose netns the runtime had torn down",
			"ip", ev.IP, "sandbox", ev.ContainerID, "ifname", ev.IfName, "pod", ev.Pod, "reason", ev.Reason, "at", ev.Time)
	}
	var unposted []allocator.AuditEvent
	for _, ev := range append(st.unposted, evs...) {
		msg := fmt.Sprintf("hostlease released %s (network %s) of sandbox %s at ADD: its netns was torn down (%s)",
			ev.IP, nr.Network, short(ev.ContainerID), ev.Reason)
		r := &allocator.Record{IP: ev.IP, ContainerID: ev.ContainerID, IfName: ev.IfName, PodUID: ev.PodUID}
		if err := s.Kube.Event(ctx, rep.API, r, "Normal", EventAddressReleasedByPlugin, msg); err != nil {
			log.Warn("could not post Event (posted again next sweep)", "ip", ev.IP, "sandbox", ev.ContainerID, "error", err)
			unposted = append(unposted, ev)
		}
	}
	if n := len(unposted) - maxUnposted; n > 0 {
		unposted, st.unpostedDropped = unposted[n:], true
		log.Warn("too many Events unposted: the oldest are posted again after the daemon's restart", "dropped", n)
	}
	st.unposted = unposted
	if len(unposted) > 0 || st.unpostedDropped {
		return
	}
	if err := markAuditReported(nr.Path, nr.Snapshot.AuditLast); err != nil {
		log.Warn("could not record the plugin's releases as reported (a restarted daemon reports them again)", "error", err)
	}
}

// maxUnposted bounds the plugin releases a store keeps in memory for an
// Event not yet posted (an API server down for long).
const maxUnposted = 1024

// EventAddressReleasedByPlugin is the reason of the Event posted on a pod
// for each address the plugin released from one of its dead sandboxes.
const EventAddressReleasedByPlugin = "AddressReleasedByPlugin"

// markAuditReported records seq as the store's last reported audit sequence
// (a log whose sequences restarted below it is read whole again:
// Tx.AuditSince).
func markAuditReported(path string, seq uint64) error {
	st, err := store.Open(path, store.OpenOptions{LockTimeout: storeLockTimeout, By: allocator.ByDaemon})
	if err != nil {
		return err
	}
	defer st.Close()
	return st.Update(func(tx *store.Tx) error { return tx.SetAuditReported(seq) })
}

// reportStore logs what was wrong with the store, and what the sweep did
// about it.
func (s *Sweeper) reportStore(log *slog.Logger, rep *SweepReport, nr *NetworkReport) {
	switch class := ErrorClass(nr.firstReadErr); class {
	case "":
		if snap := nr.Snapshot; len(snap.Damaged) > 0 {
			log.Warn("store has damaged records: their addresses stay reserved; the healthy records are swept",
				"damaged", len(snap.Damaged), "first", snap.Damaged[0].String())
		}
		if err := nr.Snapshot.RangeSetsErr; err != nil {
			log.Warn("store's range sets do not decode (the next ADD rewrites them): no pool sizes this sweep", "error", err)
		}
	case ClassUnreadable:
		log := log.With("path", nr.Path)
		switch {
		case rep.DryRun:
			log.Warn("store unreadable; would set it aside and rebuild it from CRI (dry run)", "error", nr.firstReadErr)
		case !rep.CRI.Complete:
			log.Warn("store unreadable; not rebuilding without a complete CRI answer", "error", nr.firstReadErr)
		case nr.rebuildErr != nil:
			log.Error("store unreadable and rebuild failed", "error", nr.rebuildErr, "cause", nr.firstReadErr)
		case nr.Rebuilt != "":
			log.Warn("store was unreadable: set aside and rebuilt from CRI", "setAside", nr.Rebuilt, "records", nr.rebuiltN, "cause", nr.firstReadErr)
		}
	case ClassEnvironment:
		log.Warn("store skipped this sweep: environment error (not damage; the store is left as it is)",
			"errno", errnoOf(nr.firstReadErr), "error", nr.firstReadErr)
	case ClassDamagedPage:
		log.Error("store has a damaged page: reclaiming nothing on this network; an operator rebuilds it (hostlease-gc rebuild --force)", "error", nr.firstReadErr)
	default:
		log.Warn("store skipped this sweep", "error", nr.firstReadErr)
	}
	if err := nr.WriteErr; err != nil {
		log.Error("could not apply sweep to store", "class", ErrorClass(err), "errno", errnoOf(err), "error", err)
	}
}

// reportDecisions logs and posts Events for what the sweep decided and did
// on a network it read.
func (s *Sweeper) reportDecisions(ctx context.Context, log *slog.Logger, rep *SweepReport, nr *NetworkReport) {
	for _, r := range nr.Reclaimed {
		log.Info("reclaimed address", "ip", r.IP, "sandbox", r.ContainerID, "ifname", r.IfName, "pod", r.PodRef(), "reason", r.Reason, "detail", r.Detail, "dryRun", false)
		msg := fmt.Sprintf("hostlease-gc reclaimed %s (network %s) from sandbox %s: %s", r.IP, nr.Network, short(r.ContainerID), r.Detail)
		if err := s.Kube.Event(ctx, rep.API, r.Record, "Normal", "AddressReclaimed", msg); err != nil {
			log.Warn("could not post Event", "error", err)
		}
	}
	s.reportReReserves(ctx, log, rep, nr)
	if r := nr.IndexRepair; r.Changed() {
		log.Warn("derived indexes disagreed with the records and were rebuilt from them",
			"records", r.Records, "bitsSet", r.BitsSet, "bitsCleared", r.BitsCleared,
			"ownerAdded", r.OwnerAdded, "ownerRemoved", r.OwnerRemoved, "podAdded", r.PodAdded, "podRemoved", r.PodRemoved, "countWas", r.CountWas)
	}
	for _, r := range nr.HostLocalReleased {
		log.Info("released address imported from host-local: its reservation file was removed (host-local DEL by a runtime with a cached host-local config)",
			"ip", r.IP, "container", r.ContainerID, "ifname", r.IfName)
	}
	if rep.DryRun {
		for _, d := range nr.Verdict.Decisions {
			if d.Action == reclaim.Release {
				log.Info("would reclaim address (dry run)", "ip", d.Record.IP, "sandbox", d.Record.ContainerID, "pod", d.Record.PodRef(), "reason", d.Reason, "detail", d.Detail)
			}
		}
	}
	v := &nr.Verdict
	if !v.Guarded {
		return
	}
	log.Error("MASS-RECLAIM GUARD: refusing to reclaim without proof of death; a person must look (hostlease-gc leaks)",
		"wouldReclaim", v.WouldReclaim, "limit", v.GuardLimit, "records", nr.Snapshot.Reserved(),
		"maxFraction", s.Opts.MaxReclaimFraction, "provenReclaims", v.Proven, "dryRun", rep.DryRun)
	if rep.DryRun {
		return
	}
	if err := s.Kube.Event(ctx, rep.API, nil, "Warning", "MassReclaimRefused",
		fmt.Sprintf("hostlease-gc refused to reclaim %d addresses of network %s at once without proof of death (limit %d of its %d records)",
			v.WouldReclaim, nr.Network, v.GuardLimit, nr.Snapshot.Reserved())); err != nil {
		log.Warn("could not post Event", "error", err)
	}
}

// reportReReserves logs, and posts Events for, what the reconciliation did
// (or, in a dry run, would do) and the conflicts it found.
func (s *Sweeper) reportReReserves(ctx context.Context, log *slog.Logger, rep *SweepReport, nr *NetworkReport) {
	event := func(rr reclaim.ReReserve, typ, reason, msg string) {
		r := &allocator.Record{IP: rr.IP, ContainerID: rr.Sandbox.ID, PodUID: rr.Sandbox.PodUID}
		if err := s.Kube.Event(ctx, rep.API, r, typ, reason, msg); err != nil {
			log.Warn("could not post Event", "error", err)
		}
	}
	prev := func(rr reclaim.ReReserve) string {
		if rr.Prev == nil {
			return ""
		}
		return rr.Prev.ContainerID
	}
	pod := func(sb reclaim.PodSandbox) string { return sb.PodNamespace + "/" + sb.PodName }
	for _, rr := range nr.ReReserve {
		if !rr.Conflict {
			continue
		}
		log.Error("ADDRESS CONFLICT: two READY sandboxes use one address; not rewritten, a person must look",
			"ip", rr.IP, "sandbox", rr.Sandbox.ID, "pod", pod(rr.Sandbox), "recordedFor", prev(rr))
		if rep.DryRun {
			continue
		}
		event(rr, "Warning", "AddressConflict", fmt.Sprintf("hostlease-gc: %s (network %s) is used by sandbox %s and recorded for READY sandbox %s",
			rr.IP, nr.Network, short(rr.Sandbox.ID), short(prev(rr))))
	}
	if rep.DryRun {
		for _, rr := range nr.ReReserve {
			if !rr.Conflict {
				log.Warn("would re-reserve address for the READY sandbox that uses it (dry run)", "ip", rr.IP, "reason", rr.Reason,
					"sandbox", rr.Sandbox.ID, "pod", pod(rr.Sandbox), "recordedFor", prev(rr))
			}
		}
		return
	}
	for _, rr := range nr.ReReserved {
		log.Warn("re-reserved address for the READY sandbox that uses it: the store did not hold it for that sandbox",
			"ip", rr.IP, "reason", rr.Reason, "sandbox", rr.Sandbox.ID, "pod", pod(rr.Sandbox), "recordedFor", prev(rr))
		event(rr, "Warning", "AddressReReserved", fmt.Sprintf("hostlease-gc re-reserved %s (network %s) for sandbox %s, which uses it (%s)",
			rr.IP, nr.Network, short(rr.Sandbox.ID), rr.Reason))
	}
}

func short(id string) string {
	if len(id) > 13 {
		return id[:13]
	}
	return id
}
