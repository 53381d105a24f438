package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostlease/hostlease/pkg/daemon"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// apiViewNote says what the Kubernetes API view adds to `leaks` and how to
// turn it on; printed once when leaks runs without it.
const apiViewNote = "without the Kubernetes API view, a candidate whose address a live pod on this node still lists is not vetoed here " +
	"(the daemon vetoes it); add it with --node-name NODE (and --kubeconfig FILE outside a pod), or pass --no-api to skip it quietly"

// leaksFlags are the daemon's flags that change what leaks sees or decides;
// the others (listener, interval, logging, dry-run) are run's only.
var leaksFlags = map[string]bool{"cri-endpoint": true, "data-dir": true, "misses": true, "grace": true, "min-age": true,
	"netns-grace": true, "max-reclaim-fraction": true, "node-name": true, "kubeconfig": true, "no-api": true,
	"netns-dir": true, "proc-dir": true}

// leaksCmd runs the daemon's sweep logic in dry-run mode: it reads the
// stores and CRI (and the API server if configured) and prints every record
// whose sandbox is not listed, with what the next sweep would do and why. It
// writes nothing. Without a complete CRI answer it cannot tell a leak from a
// live pod, and says so with exit status 1 rather than "no leak candidates".
func leaksCmd(stdout, stderr io.Writer) *cobra.Command {
	c := &cobra.Command{
		Use:   "leaks",
		Short: "what a sweep would reclaim now, and why (or why not)",
		Long: "What the daemon's next sweep would reclaim now, and why (or why not): the daemon's own decision, run dry\n" +
			"(nothing is written). The policy flags are the daemon's: pass the values `run` has to see its decisions.",
		Example: `  hostlease-gc leaks
  hostlease-gc leaks --node-name "$(hostname)" --all -o wide
  hostlease-gc leaks --no-api --cri-endpoint unix:///run/crio/crio.sock -o json`,
		Args: noArgs,
	}
	o := daemonFlags(c, leaksFlags)
	out := outputFlags(c)
	all := c.Flags().BoolP("all", "a", false, "show every record, not only leak candidates")
	c.RunE = func(*cobra.Command, []string) error {
		if err := checkLeaksArgs(o, out); err != nil {
			return err
		}
		rep, err := sweepDry(o, stderr)
		if err != nil {
			return err
		}
		rows, failed, damaged := leakRows(rep, *all, stderr)
		// Without a complete CRI answer no record is a candidate: print the
		// per-record verdicts only when asked for every record.
		if rep.CRI.Complete || *all {
			if err := out.render(stdout, stderr, rows, len(rows), leakTable(rows), "leak candidates", o.DataDir); err != nil {
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
	return c
}

func checkLeaksArgs(o *daemon.Options, out *output) error {
	if err := out.check(); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if err := checkCRIEndpoint(o.CRIEndpoint); err != nil {
		return err
	}
	return checkDir("--data-dir", o.DataDir)
}

// sweepDry runs one dry sweep with o and returns its report.
func sweepDry(o *daemon.Options, stderr io.Writer) (*daemon.SweepReport, error) {
	o.DryRun = true
	cri, err := daemon.DialCRI(o.CRIEndpoint)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	defer cri.Close()
	var kube *daemon.Kube
	switch {
	case o.NoAPI:
	case o.NodeName == "":
		printf(stderr, "hostlease-gc leaks: no --node-name (or NODE_NAME): %s", apiViewNote)
	default:
		kube, err = daemon.KubeFromOptions(o)
		if err != nil {
			printf(stderr, "hostlease-gc leaks: no API server (%v): %s", err, apiViewNote)
		}
	}
	s := &daemon.Sweeper{Opts: o, CRI: cri, Kube: kube, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return s.Sweep(ctx), nil
}

// leakRows turns a dry sweep's report into leaks' rows (candidates only,
// unless all), reporting on stderr what the report says could not be seen.
// failed lists why the answer is incomplete; damaged counts damaged records.
func leakRows(rep *daemon.SweepReport, all bool, stderr io.Writer) (rows []daemon.LeakRow, failed []string, damaged int) {
	now := time.Now()
	rows = []daemon.LeakRow{}
	for _, nr := range rep.Networks {
		if err := nr.Err(); err != nil {
			printf(stderr, "hostlease-gc leaks: network %s: %s", nr.Network, storeErr(nr.Network, err))
			failed = append(failed, "network "+nr.Network+" could not be read")
			continue
		}
		if nr.Snapshot != nil {
			damaged += len(nr.Snapshot.Damaged)
		}
		for _, d := range nr.Verdict.Decisions {
			if !all && !d.Candidate {
				continue
			}
			verdict := "keep"
			if d.Action == reclaim.Release {
				verdict = "reclaim"
			}
			r := d.Record
			rows = append(rows, daemon.LeakRow{Network: nr.Network, IP: r.IP.String(), Pod: r.PodRef(), Sandbox: r.ContainerID,
				State: string(r.State), AgeSeconds: ageSeconds(now.Sub(r.Created)), Verdict: verdict, Reason: string(d.Reason), Detail: d.Detail})
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
	return rows, failed, damaged
}

// leakTable is leaks' table; wide adds the reason code and whole sandbox IDs.
func leakTable(rows []daemon.LeakRow) tableFunc {
	return func(wide bool) ([]string, [][]string) {
		header := []string{"NETWORK", "IP", "POD", "SANDBOX", "STATE", "AGE", "NEXT SWEEP", "WHY"}
		id := shortID
		if wide {
			header = append(header, "REASON")
			id = orDash
		}
		var t [][]string
		for _, r := range rows {
			row := []string{r.Network, r.IP, r.Pod, id(r.Sandbox), r.State, age(time.Duration(r.AgeSeconds) * time.Second), r.Verdict, r.Detail}
			if wide {
				row = append(row, r.Reason)
			}
			t = append(t, row)
		}
		return header, t
	}
}
