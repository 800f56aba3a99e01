package main

import (
	"bytes"
	"flag"
	"strings"
	"testing"
	"time"
)

// Every duration flag of godist run takes plain seconds, as --timeout
// does and torchrun's do, or a duration (issue 27, item 10).
func TestRunDurationFlagsTakeSeconds(t *testing.T) {
	none := func(string) string { return "" }
	for _, c := range []struct {
		args []string
		env  map[string]string
		got  func(*runOptions) time.Duration
		want time.Duration
	}{
		{[]string{"--stop-timeout", "40"}, nil, func(o *runOptions) time.Duration { return o.stopGrace }, 40 * time.Second},
		{[]string{"--stop_timeout=0.5"}, nil, func(o *runOptions) time.Duration { return o.stopGrace }, 500 * time.Millisecond},
		{[]string{"--stop-timeout", "1m"}, nil, func(o *runOptions) time.Duration { return o.stopGrace }, time.Minute},
		{nil, map[string]string{"PET_STOP_TIMEOUT": "12"}, func(o *runOptions) time.Duration { return o.stopGrace }, 12 * time.Second},
		{nil, nil, func(o *runOptions) time.Duration { return o.stopGrace }, 5 * time.Second},
		{[]string{"--timeout", "40"}, nil, func(o *runOptions) time.Duration { return o.timeout }, 40 * time.Second},
		{[]string{"--timeout", "10m"}, nil, func(o *runOptions) time.Duration { return o.timeout }, 10 * time.Minute},
		{[]string{"--monitor-interval", "2"}, nil, func(o *runOptions) time.Duration { return o.monitor }, 2 * time.Second},
		{[]string{"--rdzv-conf", "join_timeout=40,last_call_timeout=1m"}, nil, func(o *runOptions) time.Duration { return o.joinTimeout + o.lastCall }, 100 * time.Second},
	} {
		get := none
		if c.env != nil {
			get = func(k string) string { return c.env[k] }
		}
		var errb bytes.Buffer
		o, code := parseRun(append(c.args, "prog"), get, &errb)
		if code >= 0 {
			t.Errorf("parseRun(%q, %v): exit %d: %s", c.args, c.env, code, errb.String())
			continue
		}
		if got := c.got(o); got != c.want {
			t.Errorf("parseRun(%q, %v): %v, want %v", c.args, c.env, got, c.want)
		}
	}
	for _, bad := range [][]string{{"--stop-timeout", "soon"}, {"--stop-timeout", "-1"}, {"--stop-timeout", "NaN"}, {"--timeout", "1e300"}} {
		var errb bytes.Buffer
		if _, code := parseRun(append(bad, "prog"), none, &errb); code != exitUsage {
			t.Errorf("parseRun(%q) = %d, want %d", bad, code, exitUsage)
		} else if !strings.Contains(errb.String(), strings.TrimLeft(bad[0], "-")) {
			t.Errorf("parseRun(%q): %q does not name the flag", bad, errb.String()[max(0, errb.Len()-200):])
		}
	}
	// godist top's and bench's duration flags are the same kind.
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	d := durationFlag(fs, "interval", time.Second, "")
	if err := fs.Parse([]string{"--interval", "2.5"}); err != nil || *d != 2500*time.Millisecond {
		t.Errorf("--interval 2.5: %v, %v", *d, err)
	}
}
