// Package store is godist's key-value rendezvous store, the equivalent of
// torch.distributed's Store: ranks publish their addresses under keys and
// block until the keys of their peers exist.
//
// There are four implementations of [Store]: [NewMem] (one process),
// [NewFile] (a file shared by the processes of a machine or a shared file
// system), [NewPrefix] (a namespace inside another store), and TCP: a
// [Server] that keeps the data in memory, usually inside rank 0 or the
// launcher, and clients made by [Dial] everywhere. A fifth, in its own
// package store/etcdstore so that only the programs that import it link
// etcd's client, keeps the keys in an etcd cluster that no rank hosts; it
// registers the scheme etcd:// with [RegisterScheme], and [Open] (which
// dist.Init uses for any scheme but env, tcp and file) opens it by URL.
//
//	// Rank 0 (or the launcher) serves the store ...
//	srv, err := store.NewServer(ctx, ":29500", store.ServerOptions{JobID: job, Token: token})
//	if err != nil { ... }
//	defer srv.Close()
//
//	// ... and every rank, rank 0 included, is a client. Dial retries until
//	// the server is up or ctx ends.
//	s, err := store.Dial(ctx, "10.0.0.1:29500", store.DialOptions{JobID: job, Token: token, Rank: rank})
//	if err != nil { ... }
//	defer s.Close()
//	s.Set(ctx, fmt.Sprintf("rank%d/addr", rank), []byte(myAddr))
//	peer, err := s.Get(ctx, "rank0/addr") // blocks until rank 0 has set it
//
// Errors: a call whose ctx ends returns a *[TimeoutError] (which wraps
// context.DeadlineExceeded or context.Canceled and names the keys and the
// store); a TCP client whose connection dies returns a *[ConnError] naming
// the server's address from every pending and later call; a closed store
// returns [ErrClosed].
package store
