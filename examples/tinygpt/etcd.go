//go:build etcd

package main

// Built with -tags etcd, tinygpt accepts the etcd:// init method that
// godist run --rdzv-backend etcd hands its workers (the etcd client stays
// out of the default build).
import _ "github.com/godist/godist/store/etcdstore"
