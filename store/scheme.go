package store

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Opener opens the store that an init-method URL names ("etcd://...").
// The Store it returns belongs to the caller, who closes it.
type Opener func(ctx context.Context, url string) (Store, error)

var schemes struct {
	sync.Mutex
	m map[string]Opener
}

// RegisterScheme makes Open (and so dist.Init's init method) accept URLs
// of the given scheme. It is for store implementations that live in their
// own package so that their dependencies are linked only into the programs
// that want them: store/etcdstore registers "etcd" in its init function,
// and a program imports it for that effect alone:
//
//	import _ "github.com/godist/godist/store/etcdstore"
//
// RegisterScheme panics if scheme is empty, open is nil, or the scheme is
// already registered (programmer errors, found at start-up).
func RegisterScheme(scheme string, open Opener) {
	if scheme == "" || open == nil {
		panic("store: RegisterScheme with an empty scheme or a nil opener")
	}
	schemes.Lock()
	defer schemes.Unlock()
	if schemes.m == nil {
		schemes.m = make(map[string]Opener)
	}
	if _, dup := schemes.m[scheme]; dup {
		panic("store: RegisterScheme called twice for scheme " + scheme)
	}
	schemes.m[scheme] = open
}

// Registered reports whether scheme has an Opener.
func Registered(scheme string) bool {
	schemes.Lock()
	defer schemes.Unlock()
	_, ok := schemes.m[scheme]
	return ok
}

// Open opens the store named by url with the Opener registered for its
// scheme (the text before "://"). An unregistered scheme is an error that
// names the registered ones and, for etcd, the import that registers it.
func Open(ctx context.Context, url string) (Store, error) {
	scheme, _, ok := strings.Cut(url, "://")
	if !ok {
		return nil, fmt.Errorf("store: %q is not a URL (want scheme://...)", url)
	}
	schemes.Lock()
	open := schemes.m[scheme]
	var known []string
	for k := range schemes.m {
		known = append(known, k+"://")
	}
	schemes.Unlock()
	if open == nil {
		sort.Strings(known)
		hint := ""
		if scheme == "etcd" {
			hint = `; etcd:// needs the etcd store linked into the program: import _ "github.com/godist/godist/store/etcdstore"`
		}
		return nil, fmt.Errorf("store: no store registered for %s:// (registered: %v)%s", scheme, known, hint)
	}
	return open(ctx, url)
}
