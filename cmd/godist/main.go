// Command godist is the one binary of godist: the launcher (godist run,
// torchrun's counterpart), the collective benchmark, the standalone store
// server, the live view of a job and build information.
//
//	godist run --standalone --nproc-per-node 2 ./train
//	godist bench --nproc 2 --ops all_reduce,barrier --max-bytes 1MiB
//	godist store --addr :29500
//	godist top --store host:port
//	godist trace -o timeline.json godist-flight-rank*.json
//	godist version
//	godist help [command]
//
// Each subcommand has its own flags; `godist <command> -h` lists them.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// command is one subcommand. run gets the arguments after the command's
// name and returns the process's exit status.
type command struct {
	name    string
	summary string
	run     func(args []string) int
}

// commands is the dispatch table, in the order `godist help` lists them.
var commands = []command{
	{"run", "launch, watch and restart workers on this node (torchrun)", runMain},
	{"bench", "measure collectives over N local ranks (nccl-tests style)", benchMain},
	{"store", "serve a standalone TCP store until interrupted", storeMain},
	{"top", "show what every rank of a running job is doing, live", topMain},
	{"trace", "merge ranks' flight records into a Chrome trace", traceMain},
	{"version", "print the build and the BLAS in use", versionMain},
}

// benchWorkerCmd is the hidden first argument with which godist bench
// re-executes itself as one rank.
const benchWorkerCmd = "__bench-worker"

func main() { os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr)) }

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			usage(stdout)
			return exitOK
		}
		if c, ok := lookup(rest[0]); ok {
			return c.run([]string{"-h"})
		}
		fmt.Fprintf(stderr, "godist help: unknown command %q\n", rest[0])
		usage(stderr)
		return exitUsage
	case benchWorkerCmd:
		return benchWorker()
	}
	c, ok := lookup(name)
	if !ok {
		fmt.Fprintf(stderr, "godist: unknown command %q\n\n", name)
		usage(stderr)
		return exitUsage
	}
	return c.run(rest)
}

func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func usage(w io.Writer) {
	var b strings.Builder
	b.WriteString("godist: torch.distributed in Go.\n\nUsage:\n\n\tgodist <command> [flags]\n\nCommands:\n\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "\t%-8s %s\n", c.name, c.summary)
	}
	b.WriteString("\t" + fmt.Sprintf("%-8s %s", "help", "show this, or a command's flags: godist help <command>") + "\n")
	b.WriteString("\nRun 'godist <command> -h' for a command's flags.\n")
	io.WriteString(w, b.String())
}
