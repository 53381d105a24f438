package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/hostlease/hostlease/pkg/gc"
)

// leakRow is one leak candidate (or reclaim-eligible record) and the verdict.
type leakRow struct {
	Network string `json:"network"`
	IP      string `json:"ip"`
	Pod     string `json:"pod,omitempty"`
	Sandbox string `json:"sandbox"`
	State   string `json:"state"`
	Age     string `json:"age"`
	Verdict string `json:"verdict"` // reclaim, or why not
	Reason  string `json:"reason"`
	Detail  string `json:"detail"`
}

// cmdLeaks runs the daemon's sweep logic in dry-run mode: it reads the stores and
// CRI (and the API server if configured) and prints every record whose sandbox
// is not listed, with what the next sweep would do and why. It writes nothing.
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
	o.DryRun = true
	cri, err := gc.DialCRI(o.CRIEndpoint)
	if err != nil {
		return err
	}
	defer cri.Close()
	kube, err := gc.KubeFromOptions(o)
	if err != nil {
		return err
	}
	s := &gc.Sweeper{Opts: o, CRI: cri, Kube: kube, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep := s.Sweep(ctx)
	now := time.Now()
	rows := []leakRow{}
	for _, nr := range rep.Networks {
		if nr.Err != nil {
			fmt.Fprintf(stderr, "hostlease-gc leaks: network %s: %v\n", nr.Network, nr.Err)
			continue
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
			rows = append(rows, leakRow{Network: nr.Network, IP: r.IP.String(), Pod: r.PodRef(), Sandbox: r.ContainerID,
				State: string(r.State), Age: age(now.Sub(r.Created)), Verdict: verdict, Reason: d.Reason, Detail: d.Detail})
		}
	}
	var criErr error
	if !rep.CRI.Complete {
		criErr = fmt.Errorf("CRI answer not usable (%s): nothing would be reclaimed", rep.CRI.Why)
	}
	if *out == "json" {
		if err := writeJSON(stdout, rows); err != nil {
			return err
		}
		return criErr
	}
	if len(rows) == 0 {
		fmt.Fprintln(stdout, "no leak candidates")
		return criErr
	}
	var t [][]string
	for _, r := range rows {
		t = append(t, []string{r.Network, r.IP, orDash(r.Pod), shortID(r.Sandbox), r.State, r.Age, r.Verdict, r.Detail})
	}
	if err := table(stdout, []string{"NETWORK", "IP", "POD", "SANDBOX", "STATE", "AGE", "NEXT SWEEP", "WHY"}, t); err != nil {
		return err
	}
	return criErr
}
