package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/godist/godist/internal/blas"
)

func versionMain(args []string) int {
	fs := flag.NewFlagSet("godist version", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: godist version\n\nPrints the module version, the Go toolchain, the VCS revision and the BLAS in use.\n")
	}
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "godist version: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	fmt.Print(versionText())
	return exitOK
}

// versionText is what godist version prints.
func versionText() string {
	s := ""
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		s += "godist (no build information)\n"
	} else {
		s += fmt.Sprintf("godist %s %s\n", bi.Main.Path, bi.Main.Version)
		for _, kv := range bi.Settings {
			switch kv.Key {
			case "vcs.revision", "vcs.time", "vcs.modified", "-tags", "CGO_ENABLED":
				s += fmt.Sprintf("%-12s %s\n", kv.Key+":", kv.Value)
			}
		}
	}
	s += fmt.Sprintf("%-12s %s %s/%s\n", "go:", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	s += fmt.Sprintf("%-12s %s\n", "blas:", blas.Default.Name())
	return s
}

// flagExit turns a FlagSet.Parse error into an exit status: -h is success,
// anything else a usage error (the FlagSet has already said what).
func flagExit(err error) int {
	if err == flag.ErrHelp {
		return exitOK
	}
	return exitUsage
}
