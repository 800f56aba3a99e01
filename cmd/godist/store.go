package main

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"net"
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
	maxConns := fs.Int("max-conns", store.DefaultMaxConns, "most `clients` served at once; the descriptor limit is raised to match where the process may")
	insecure := fs.Bool("insecure", false, "without a token, listen on --addr even off loopback (a private network only: any client could rewrite the job's addresses)")
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
	listen, note, err := storeListenAddr(*addr, token != nil, *insecure, *tokenEnv)
	if err != nil {
		logger.Printf("%v", err)
		return exitUsage
	}
	if note != "" {
		logger.Printf("%s", note)
	}
	*addr = listen
	if *maxConns > 0 {
		// One descriptor a client, and a few for the process itself.
		want := uint64(*maxConns) + 64
		if have, err := store.RaiseFileLimit(want); err != nil || have < want {
			logger.Printf("the descriptor limit (%d) admits about %d clients, fewer than --max-conns %d: raise it (ulimit -n, LimitNOFILE=) or run as root", have, max(int(have)-64, 0), *maxConns)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := store.NewServer(ctx, *addr, store.ServerOptions{Token: token, JobID: *jobID, Logf: logger.Printf, MaxConns: *maxConns})
	if err != nil {
		logger.Printf("%v", err)
		return exitFail
	}
	auth := "no token (unauthenticated; --insecure)"
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

// storeListenAddr is where godist store listens: addr as given with a
// token or --insecure; without either, loopback only (an empty host
// becomes 127.0.0.1, with a note) and a host off loopback is refused,
// since any client of an unauthenticated store could rewrite the job's
// addresses and join it as any rank.
func storeListenAddr(addr string, haveToken, insecure bool, tokenEnv string) (listen, note string, err error) {
	if haveToken || insecure {
		return addr, "", nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", "", fmt.Errorf("--addr %q: %v", addr, err)
	}
	switch {
	case host == "":
		return net.JoinHostPort("127.0.0.1", port), fmt.Sprintf("no token in $%s: listening on loopback only (set the token, or pass --insecure on a private network, to serve other hosts)", tokenEnv), nil
	case !isLoopbackHost(host):
		return "", "", fmt.Errorf("no token in $%s: refusing to listen on %s, where any client could rewrite the job's addresses and join it as any rank; set the token (every rank needs the same one) or pass --insecure on a private network", tokenEnv, addr)
	}
	return addr, "", nil
}
