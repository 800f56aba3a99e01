package main

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/godist/godist/store"
)

func storeMain(args []string) int {
	fs := flag.NewFlagSet("godist store", flag.ContinueOnError)
	addr := fs.String("addr", ":29500", "`host:port` to listen on (port 0 picks a free one)")
	tokenEnv := fs.String("token-env", "GODIST_TOKEN", "name of the environment `variable` holding the job token (hex or raw); unset or empty means no authentication")
	jobID := fs.String("job-id", os.Getenv("GODIST_RUN_ID"), "job `id` clients must present (default $GODIST_RUN_ID)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: godist store [flags]\n\nServes a TCP store (the rendezvous of dist.Init's tcp:// and env://) until SIGINT or SIGTERM.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "godist store: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	logger := log.New(os.Stderr, "godist store: ", log.LstdFlags)
	token := tokenFrom(os.Getenv(*tokenEnv))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := store.NewServer(ctx, *addr, store.ServerOptions{Token: token, JobID: *jobID, Logf: logger.Printf})
	if err != nil {
		logger.Printf("%v", err)
		return exitFail
	}
	auth := "no token (unauthenticated)"
	if token != nil {
		auth = "token from $" + *tokenEnv
	}
	logger.Printf("listening on %s (job id %q, %s)", srv.Addr(), *jobID, auth)
	<-ctx.Done()
	logger.Printf("shutting down")
	if err := srv.Close(); err != nil {
		logger.Printf("close: %v", err)
		return exitFail
	}
	return exitOK
}

// tokenFrom reads a token as dist.Init does: hex when it decodes as hex,
// the raw bytes otherwise; empty means none.
func tokenFrom(s string) []byte {
	if s == "" {
		return nil
	}
	if b, err := hex.DecodeString(s); err == nil {
		return b
	}
	return []byte(s)
}
