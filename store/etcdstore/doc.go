// Package etcdstore is a [store.Store] kept in an etcd cluster, so that a
// job's store lives outside every process of the job: the launcher or the
// rank that would host a TCP store can die and the others go on. It is the
// only godist package that imports etcd's client
// (go.etcd.io/etcd/client/v3); programs that do not import it do not link
// it.
//
//	s, err := etcdstore.New(ctx, []string{"10.0.0.1:2379"}, "godist/job42/", etcdstore.Options{})
//	if err != nil { ... }
//	defer s.Close()
//	s.Set(ctx, "rank0/addr", []byte(addr))
//	peer, err := s.Get(ctx, "rank1/addr") // a watch, not a poll
//
// Importing the package also registers the "etcd" scheme with
// [store.RegisterScheme], so that dist.Init accepts the init method
// etcd://host:port[,host:port...]/prefix and `godist run --rdzv-backend
// etcd` can hand its workers one:
//
//	import _ "github.com/godist/godist/store/etcdstore"
//
// Every key k is stored as prefix+k. Set and Delete are single requests;
// Add and CompareAndSet read the key and write it in a transaction
// conditioned on its modification revision, retrying when another client
// wrote in between; write-once keys ([store.WriteOnce]) are written only in
// transactions conditioned on the key's absence (create revision 0), so a
// published key can be neither changed nor deleted. Get and Wait read at a
// revision and then watch the keys from the next revision: nothing polls,
// and no write between the read and the watch is missed.
//
// Values may be as long as the server's --max-request-bytes allows (1.5 MiB
// by default; store.MaxValueLen at most): a longer one fails with an error
// wrapping [store.ErrTooLarge]. etcd's own authentication and TLS are not
// used: run the cluster on a network only the job's nodes reach. A call
// made while no etcd member can be reached waits (the client reconnects)
// until its ctx ends.
package etcdstore
