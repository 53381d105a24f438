//go:build !linux

package daemon

import (
	"context"
	"log/slog"
	"time"
)

// WatchNetnsDir needs inotify; elsewhere sweeps run on the interval and on
// exhaustion only.
func WatchNetnsDir(ctx context.Context, dir string, debounce, retry time.Duration, log *slog.Logger) <-chan struct{} {
	return make(chan struct{})
}
