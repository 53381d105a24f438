package daemon

import (
	"io"
	"log/slog"
)

// logLevels are --log-level's values.
var logLevels = map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}

func validLogLevel(s string) bool {
	_, ok := logLevels[s]
	return ok
}

// NewLogger is the daemon's logger: o.LogFormat (text or json) at
// o.LogLevel (info when unset), written to w. Every duration is logged as
// seconds: a float in JSON ("took":0.0123), a Go duration string in text
// (took=12.3ms), never slog's default integer nanoseconds.
func NewLogger(o *Options, w io.Writer) *slog.Logger {
	level, ok := logLevels[o.LogLevel]
	if !ok {
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if o.LogFormat == "json" {
		opts.ReplaceAttr = secondsAttr
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// secondsAttr rewrites a duration attribute as float seconds.
func secondsAttr(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.Float64(a.Key, a.Value.Duration().Seconds())
	}
	return a
}
