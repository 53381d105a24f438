// Package cniexec classifies what one exec'd CNI plugin process did, for the
// tests that run hostlease as a runtime would.
package cniexec

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// Outcome is what one plugin process did.
type Outcome struct {
	Stdout, Stderr []byte
	// Err is the CNI error the plugin printed, nil on exit 0.
	Err *types.Error
	// ExitErr is set when the process could not run or exited otherwise.
	ExitErr error
	Elapsed time.Duration
}

// OK reports a clean exit 0.
func (o Outcome) OK() bool { return o.Err == nil && o.ExitErr == nil }

func (o Outcome) String() string {
	switch {
	case o.ExitErr != nil:
		return fmt.Sprintf("exec failure: %v (stdout %q, stderr %q)", o.ExitErr, o.Stdout, o.Stderr)
	case o.Err != nil:
		return fmt.Sprintf("CNI error %d: %s %s (stderr %q)", o.Err.Code, o.Err.Msg, o.Err.Details, o.Stderr)
	}
	return "ok"
}

// Classify turns a finished process (err from cmd.Run or cmd.Wait) into an
// Outcome: exit 0, a CNI error JSON on stdout with exit 1 (as skel prints
// it), or anything else.
func Classify(err error, stdout, stderr []byte, elapsed time.Duration) Outcome {
	o := Outcome{Stdout: stdout, Stderr: stderr, Elapsed: elapsed}
	if err == nil {
		return o
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 {
		var cerr types.Error
		if json.Unmarshal(stdout, &cerr) == nil && cerr.Code != 0 {
			o.Err = &cerr
			return o
		}
	}
	o.ExitErr = err
	return o
}

// ResultIPs returns the addresses (with their prefix lengths) of a CNI result
// a plugin printed on stdout.
func ResultIPs(stdout []byte) ([]netip.Prefix, error) {
	var res struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(stdout, &res); err != nil {
		return nil, fmt.Errorf("result %q: %w", stdout, err)
	}
	var out []netip.Prefix
	for _, ip := range res.IPs {
		p, err := netip.ParsePrefix(ip.Address)
		if err != nil {
			return nil, fmt.Errorf("result %q: %w", stdout, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// ResultIP returns the one address of a CNI result, failing when the result
// holds another number of addresses.
func ResultIP(stdout []byte) (netip.Addr, error) {
	ps, err := ResultIPs(stdout)
	if err != nil {
		return netip.Addr{}, err
	}
	if len(ps) != 1 {
		return netip.Addr{}, fmt.Errorf("result %q: want one address, got %d", stdout, len(ps))
	}
	return ps[0].Addr(), nil
}
