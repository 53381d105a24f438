package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/hostlease/hostlease/pkg/gc"
)

// apiViewNote says what the Kubernetes API view adds to `leaks` and how to
// turn it on; printed once when leaks runs without it.
const apiViewNote = "without the Kubernetes API view, a candidate whose address a live pod on this node still lists is not vetoed here " +
	"(the daemon vetoes it); add it with --node-name NODE (and --kubeconfig FILE outside a pod), or pass --no-api to skip it quietly"

// cmdLeaks runs the daemon's sweep logic in dry-run mode: it reads the stores and
// CRI (and the API server if configured) and prints every record whose sandbox
// is not listed, with what the next sweep would do and why. It writes nothing.
// Without a complete CRI answer it cannot tell a leak from a live pod, and says
// so with exit status 1 rather than "no leak candidates".
func cmdLeaks(args []string, stdout, stderr io.Writer) error {
	fs := flagSet("leaks", stderr)
	o := gc.RegisterRunFlags(fs)
	out := outputFlag(fs)
	all := fs.Bool("all", false, "show every record, not only leak candidates")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := checkOutput(*out); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if err := checkCRIEndpoint(o.CRIEndpoint); err != nil {
		return err
	}
	if err := checkDir("--data-dir", o.DataDir); err != nil {
		return err
	}
	o.DryRun = true
	cri, err := gc.DialCRI(o.CRIEndpoint)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	defer cri.Close()
	var kube *gc.Kube
	switch {
	case o.NoAPI:
	case o.NodeName == "":
		printf(stderr, "hostlease-gc leaks: no --node-name (or NODE_NAME): %s", apiViewNote)
	default:
		kube, err = gc.KubeFromOptions(o)
		if err != nil {
			printf(stderr, "hostlease-gc leaks: no API server (%v): %s", err, apiViewNote)
		}
	}
	s := &gc.Sweeper{Opts: o, CRI: cri, Kube: kube, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep := s.Sweep(ctx)
	now := time.Now()
	rows := []gc.LeakRow{}
	var failed []string
	damaged := 0
	for _, nr := range rep.Networks {
		if nr.Err != nil {
			printf(stderr, "hostlease-gc leaks: network %s: %s", nr.Network, storeErr(nr.Network, nr.Err))
			failed = append(failed, "network "+nr.Network+" could not be read")
			continue
		}
		if nr.Snapshot != nil {
			damaged += len(nr.Snapshot.Damaged)
		}
		for _, d := range nr.Verdict.Decisions {
			if !*all && !d.Candidate {
				continue
			}
			verdict := "keep"
			if d.Action == gc.Reclaim {
				verdict = "reclaim"
			}
			r := d.Record
			rows = append(rows, gc.LeakRow{Network: nr.Network, IP: r.IP.String(), Pod: r.PodRef(), Sandbox: r.ContainerID,
				State: string(r.State), Age: age(now.Sub(r.Created)), Verdict: verdict, Reason: string(d.Reason), Detail: d.Detail})
		}
	}
	if !rep.CRI.Complete {
		failed = append([]string{fmt.Sprintf("CRI answer not usable (%s): cannot tell which addresses leaked; a sweep now would reclaim nothing", rep.CRI.Why)}, failed...)
	}
	if st := rep.Netns; st.Warn() {
		printf(stderr, "hostlease-gc leaks: netns proof unavailable (%s): %s", st.State, st.Why)
	}
	if rep.API.Enabled && !rep.API.Available {
		printf(stderr, "hostlease-gc leaks: the API server could not be read: candidates are kept (reason api_unavailable)")
	}
	// Without a complete CRI answer no record is a candidate: print the
	// per-record verdicts only when asked for every record.
	if rep.CRI.Complete || *all {
		if err := printLeaks(stdout, *out, rows, len(failed) > 0); err != nil {
			return err
		}
	}
	switch {
	case len(failed) > 0:
		return errors.New(strings.Join(failed, "; "))
	case damaged > 0:
		// Their addresses stay reserved: never leak candidates.
		return damagedSummary(damaged)
	}
	return nil
}

// printLeaks prints the rows; partial says some stores could not be read.
func printLeaks(stdout io.Writer, format string, rows []gc.LeakRow, partial bool) error {
	if format == "json" {
		return writeJSON(stdout, rows)
	}
	if len(rows) == 0 {
		msg := "no leak candidates"
		if partial {
			msg += " in the stores that could be read"
		}
		_, err := fmt.Fprintln(stdout, msg)
		return err
	}
	var t [][]string
	for _, r := range rows {
		t = append(t, []string{r.Network, r.IP, orDash(r.Pod), shortID(r.Sandbox), r.State, r.Age, r.Verdict, r.Detail})
	}
	return table(stdout, []string{"NETWORK", "IP", "POD", "SANDBOX", "STATE", "AGE", "NEXT SWEEP", "WHY"}, t)
}
