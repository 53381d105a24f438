package main

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/hostlease/hostlease/pkg/daemon"
)

func runCmd(stderr io.Writer) *cobra.Command {
	c := &cobra.Command{
		Use:   "run",
		Short: "run the reconciling daemon",
		Long: "Run the node daemon: sweep the stores against CRI every --interval (and when a netns disappears or an\n" +
			"exhaustion is recorded), reclaim what the policy proves leaked, export metrics on --metrics-addr.\n" +
			"Logs go to stderr; SIGINT or SIGTERM stops it after one line saying so.",
		Example: `  hostlease-gc run --node-name "$NODE_NAME" --cri-endpoint unix:///run/containerd/containerd.sock
  hostlease-gc run --no-api --dry-run --log-level debug --log-format json`,
		Args: noArgs,
	}
	o := daemonFlags(c, nil)
	c.RunE = func(*cobra.Command, []string) error {
		if err := o.Validate(); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		log := daemon.NewLogger(o, stderr)
		d, err := daemon.NewDaemon(o, log)
		if err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		return d.Run(ctx)
	}
	return c
}
