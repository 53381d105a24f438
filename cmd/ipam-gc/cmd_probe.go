package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// probePaths are what `probe` asks for, by argument.
var probePaths = map[string]string{"healthz": "/healthz", "readyz": "/readyz"}

// probeCmd asks the daemon's probe socket (`run --probe-socket`) one
// question, as the DaemonSet's exec probes do: exit 0 and the answer on
// stdout when the daemon says yes (200), exit 1 and the answer when it says
// no or does not answer in --timeout.
func probeCmd(stdout io.Writer) *cobra.Command {
	var socket string
	timeout := 4 * time.Second
	c := &cobra.Command{
		Use:   "probe healthz|readyz",
		Short: "ask the daemon's probe socket whether it is alive (healthz) or ready (readyz)",
		Long: "Ask the running daemon, over its --probe-socket, whether it is alive (healthz: a sweep finished\n" +
			"recently) or ready (readyz: a sweep reached CRI and the data dir is usable). The DaemonSet's liveness\n" +
			"and readiness probes run this: on the unix socket no other client competes with them.",
		Example: `  hostlease-gc probe healthz --socket /tmp/probe/probe.sock
  hostlease-gc probe readyz --socket /tmp/probe/probe.sock --timeout 4s`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 || probePaths[args[0]] == "" {
				return fmt.Errorf("%w: want one argument, healthz or readyz, got %q", errUsage, strings.Join(args, " "))
			}
			return nil
		},
	}
	c.Flags().StringVar(&socket, "socket", "", "the daemon's --probe-socket (required)")
	c.Flags().Var((*positiveDuration)(&timeout), "timeout", "give up after this long (keep it below the probe's timeoutSeconds)")
	c.RunE = func(_ *cobra.Command, args []string) error {
		if socket == "" {
			return fmt.Errorf("%w: --socket must not be empty", errUsage)
		}
		code, body, err := askProbe(socket, probePaths[args[0]], timeout)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("%s: %d %s", args[0], code, strings.TrimSpace(body))
		}
		_, err = io.WriteString(stdout, body)
		return err
	}
	return c
}

// askProbe makes one GET of path on the unix socket, without keep-alive.
func askProbe(socket, path string, timeout time.Duration) (int, string, error) {
	var d net.Dialer
	client := http.Client{Timeout: timeout, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", socket)
		},
	}}
	resp, err := client.Get("http://probe" + path)
	if err != nil {
		return 0, "", fmt.Errorf("probe socket %s: %w", socket, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if err != nil {
		return 0, "", fmt.Errorf("probe socket %s: %w", socket, err)
	}
	return resp.StatusCode, string(b), nil
}
