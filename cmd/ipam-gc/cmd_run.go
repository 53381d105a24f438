package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"syscall"

	"github.com/hostlease/hostlease/pkg/gc"
)

func newLogger(format string, w io.Writer) *slog.Logger {
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

func cmdRun(args []string, _, stderr io.Writer) error {
	fs := flagSet("run", stderr)
	o := gc.RegisterRunFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	d, err := gc.NewDaemon(o, newLogger(o.LogFormat, stderr))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return d.Run(ctx)
}
