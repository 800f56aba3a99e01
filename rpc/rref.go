package rpc

import (
	"context"
	"errors"
	"fmt"

	"github.com/godist/godist/rpc/internal/wire"
)

// ErrNoRRef: the RRef named is not owned by the worker asked (released,
// or never created there).
var ErrNoRRef = errors.New("no such RRef at its owner")

// RRef is a reference to a value of type T held by its owner worker.
type RRef[T any] struct{ r *rrefHandle }

type rrefHandle struct {
	owner int32
	id    id
}

type rrefs struct{ a *Agent }

func newRRefs(a *Agent) *rrefs { return &rrefs{a: a} }

func (s *rrefs) onMessage(src int, msg []byte) {}
func (s *rrefs) peerDown(r int, err error)     {}
func (s *rrefs) ownedValue(i id) (any, error)  { return nil, fmt.Errorf("%w: %v", ErrNoRRef, i) }
func (s *rrefs) serveOwnerOp(src int, h *head, reply func(any, uint64, error)) {
	reply(nil, 0, &wireError{Kind: errNoRRef, Message: "not yet"})
}
func (s *rrefs) serveRemote(src int, h *head, fn *handler, d *wire.Decoder, ctx context.Context, reply func(any, uint64, error)) {
	reply(nil, 0, &wireError{Kind: errNoRRef, Message: "not yet"})
}

func (s *rrefs) releaseAll() {}
