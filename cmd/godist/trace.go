package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/godist/godist/dist"
)

// maxDumpLen bounds a flight dump read by godist trace.
const maxDumpLen = 256 << 20

func traceMain(args []string) int { return traceRun(args, os.Stdout, os.Stderr) }

func traceRun(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("godist trace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "write the trace to `file` (default: standard output)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: godist trace [-o trace.json] FLIGHT.json...

Merges flight records (the godist-flight-rank<R>-<pid>.json files that
ranks write on a timeout, a desync, SIGUSR1 or DumpFlight) into one
Chrome trace, a track per rank and a row per group: open it in
chrome://tracing or https://ui.perfetto.dev.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return exitUsage
	}
	var dumps []*dist.FlightDump
	for _, path := range fs.Args() {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintf(stderr, "godist trace: %v\n", err)
			return exitFail
		}
		d := new(dist.FlightDump)
		err = json.NewDecoder(io.LimitReader(f, maxDumpLen)).Decode(d)
		f.Close()
		if err != nil {
			fmt.Fprintf(stderr, "godist trace: %s: not a flight record: %v\n", path, err)
			return exitFail
		}
		dumps = append(dumps, d)
	}
	w := stdout
	var f *os.File
	if *out != "" {
		var err error
		if f, err = os.Create(*out); err != nil {
			fmt.Fprintf(stderr, "godist trace: %v\n", err)
			return exitFail
		}
		w = f
	}
	bw := bufio.NewWriter(w)
	err := dist.WriteChromeTrace(bw, dumps...)
	if err == nil {
		err = bw.Flush()
	}
	if f != nil {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "godist trace: %v\n", err)
		return exitFail
	}
	return exitOK
}
