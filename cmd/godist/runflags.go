package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

// The flag layer of godist run: torchrun's flags in both spellings
// (--nproc-per-node and --nproc_per_node), with defaults from GODIST_* and
// then PET_* variables (PET_NPROC_PER_NODE, as Kubeflow's PyTorchJob
// sets), and the flags winning over both.

// envNames returns the variables that give flag name its default, in
// order of precedence.
func envNames(name string) []string {
	up := strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	return []string{"GODIST_" + up, "PET_" + up}
}

// envDefaults sets every flag of fs whose variable is set. It returns an
// error naming the variable when a value does not parse.
func envDefaults(fs *flag.FlagSet, getenv func(string) string) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil {
			return
		}
		for _, n := range envNames(f.Name) {
			v := getenv(n)
			if v == "" {
				continue
			}
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("$%s=%q: %v", n, v, e)
			}
			return
		}
	})
	return err
}

// splitArgs normalizes the launcher's flags (underscores to dashes in the
// names) up to PROGRAM, which is the first argument that is not a flag or
// a flag's value (or the one after "--"). It returns the launcher's
// arguments and the program's command line, untouched.
func splitArgs(fs *flag.FlagSet, args []string) (own, prog []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return own, args[i+1:]
		}
		if len(a) < 2 || a[0] != '-' {
			return own, args[i:]
		}
		name := strings.TrimLeft(a, "-")
		name, value, hasValue := strings.Cut(name, "=")
		name = strings.ReplaceAll(name, "_", "-")
		norm := "--" + name
		if hasValue {
			norm += "=" + value
		}
		own = append(own, norm)
		f := fs.Lookup(name)
		if f == nil || hasValue {
			continue // unknown flags are fs.Parse's to report
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) {
			i++
			own = append(own, args[i])
		}
	}
	return own, nil
}

// parseRunFlags parses godist run's command line: flags, then PROGRAM
// [ARGS...]. Variables give defaults, flags win.
func parseRunFlags(fs *flag.FlagSet, args []string, getenv func(string) string) (prog []string, err error) {
	if err := envDefaults(fs, getenv); err != nil {
		return nil, err
	}
	own, prog := splitArgs(fs, args)
	if err := fs.Parse(own); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 { // cannot happen: splitArgs stopped at the program
		prog = append(fs.Args(), prog...)
	}
	return prog, nil
}

// getenvOS is os.Getenv, as a value for tests to replace.
var getenvOS = os.Getenv

// secondsFlag is a duration flag that takes plain seconds ("40", "0.5"),
// as torchrun's timeouts do and as --timeout and --monitor-interval do,
// or a Go duration ("10m", "500ms").
type secondsFlag time.Duration

func (d *secondsFlag) String() string { return time.Duration(*d).String() }

func (d *secondsFlag) Set(s string) error {
	v, err := parseSeconds(s)
	if err != nil {
		return errors.New("want seconds (40) or a duration (10m)")
	}
	*d = secondsFlag(v)
	return nil
}

// durationFlag defines a flag as fs.Duration does, but one that also takes
// plain seconds (secondsFlag).
func durationFlag(fs *flag.FlagSet, name string, value time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	*p = value
	fs.Var((*secondsFlag)(p), name, usage)
	return p
}
