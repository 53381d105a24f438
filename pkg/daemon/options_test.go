package daemon

import (
	"flag"
	"github.com/hostlease/hostlease/pkg/reclaim"
	"io"
	"strings"
	"testing"
)

// parseRun parses `run` flags as the command line does, defaults first.
func parseRun(t *testing.T, args ...string) (*Options, error) {
	t.Helper()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := RegisterRunFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return o, nil
}

func TestOptionsValidate(t *testing.T) {
	cases := []struct {
		args []string
		flag string // "" when valid
	}{
		{nil, ""},
		{[]string{"--interval", "1s"}, ""},
		{[]string{"--interval", "1h"}, ""},
		{[]string{"--interval", "999ms"}, "--interval"},
		{[]string{"--interval", "1ns"}, "--interval"},
		{[]string{"--interval", "0s"}, "--interval"},
		{[]string{"--interval", "-30s"}, "--interval"},
		{[]string{"--interval", "61m"}, "--interval"},
		{[]string{"--misses", "0"}, "--misses"},
		{[]string{"--misses", "-1"}, "--misses"},
		{[]string{"--misses", "1000"}, ""},
		{[]string{"--misses", "1001"}, "--misses"},
		{[]string{"--grace", "-1s"}, "--grace"},
		{[]string{"--grace", "0s"}, ""},
		{[]string{"--grace", "24h"}, ""},
		{[]string{"--grace", "25h"}, "--grace"},
		{[]string{"--grace", "2562047h"}, "--grace"},
		{[]string{"--min-age", "-5m"}, "--min-age"},
		{[]string{"--min-age", "100h"}, "--min-age"},
		{[]string{"--netns-grace", "-1ns"}, "--netns-grace"},
		{[]string{"--netns-grace", "48h"}, "--netns-grace"},
		{[]string{"--netns-grace", "1s"}, ""},
		{[]string{"--max-reclaim-fraction", "NaN"}, "--max-reclaim-fraction"},
		{[]string{"--max-reclaim-fraction", "nan"}, "--max-reclaim-fraction"},
		{[]string{"--max-reclaim-fraction", "Inf"}, "--max-reclaim-fraction"},
		{[]string{"--max-reclaim-fraction", "+Inf"}, "--max-reclaim-fraction"},
		{[]string{"--max-reclaim-fraction", "-Inf"}, "--max-reclaim-fraction"},
		{[]string{"--max-reclaim-fraction", "0"}, "--max-reclaim-fraction"},
		{[]string{"--max-reclaim-fraction", "-0.1"}, "--max-reclaim-fraction"},
		{[]string{"--max-reclaim-fraction", "1.0000001"}, "--max-reclaim-fraction"},
		{[]string{"--max-reclaim-fraction", "1e300"}, "--max-reclaim-fraction"},
		{[]string{"--max-reclaim-fraction", "1"}, ""},
		{[]string{"--max-reclaim-fraction", "1e-9"}, ""},
		{[]string{"--log-format", "xml"}, "--log-format"},
		{[]string{"--cri-endpoint", ""}, "--cri-endpoint"},
		{[]string{"--data-dir", ""}, "--data-dir"},
		{[]string{"--http-max-connections", "0"}, "--http-max-connections"},
		{[]string{"--http-max-connections", "1"}, ""},
		{[]string{"--http-max-connections", "65537"}, "--http-max-connections"},
		{[]string{"--http-max-connections-per-client", "0"}, "--http-max-connections-per-client"},
		{[]string{"--http-max-connections-per-client", "65537"}, "--http-max-connections-per-client"},
		{[]string{"--http-max-connections-per-client", "1"}, ""},
		{[]string{"--http-read-header-timeout", "0s"}, "--http-read-header-timeout"},
		{[]string{"--http-read-timeout", "-1s"}, "--http-read-timeout"},
		{[]string{"--http-write-timeout", "11m"}, "--http-write-timeout"},
		{[]string{"--http-idle-timeout", "0s"}, "--http-idle-timeout"},
		{[]string{"--http-idle-timeout", "10m"}, ""},
		{[]string{"--http-max-header-bytes", "1023"}, "--http-max-header-bytes"},
		{[]string{"--http-max-header-bytes", "1048577"}, "--http-max-header-bytes"},
		{[]string{"--http-max-header-bytes", "1024"}, ""},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o, err := parseRun(t, tc.args...)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			err = o.Validate()
			switch {
			case tc.flag == "" && err != nil:
				t.Fatalf("Validate: %v, want nil", err)
			case tc.flag != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.flag+" ")):
				t.Fatalf("Validate: %v, want an error naming %s", err, tc.flag)
			}
		})
	}
}

// The shipped defaults are valid and are what docs/contracts.md promises.
func TestOptionsDefaults(t *testing.T) {
	o, err := parseRun(t)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.NetnsGrace != 0 || o.MaxReclaimFraction != reclaim.DefaultMaxFraction || o.ProcDir != "/proc" || o.NetnsDir != DefaultNetnsDir ||
		o.HTTP != (HTTPLimits{}).withDefaults() {
		t.Fatalf("defaults: %+v", o)
	}
}
