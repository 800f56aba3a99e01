// Package transport connects one rank of a job to all the others and moves
// framed, authenticated messages between them: the layer under package
// dist, which knows nothing here of collectives beyond a key and a
// fingerprint.
//
// An Endpoint is one rank's connections. Send writes one frame (a 48-byte
// header and the payload, with one vectored write and no copy of the
// payload); Post registers a receive before its frame arrives, so that the
// payload lands straight in the caller's buffer, and Wait waits for it (Recv
// is both). A frame that arrives before any receive wants it is kept until
// one does. Frames are matched by their Key (group, sequence number of the
// call in the group, tag) and their source rank, or by any Match function.
// The header (proto.go, which holds the whole format) carries a magic and
// version, the kind, the key, the sender's fingerprint of the call, the
// payload length, the payload's CRC32C (none for a payload in shared
// memory, which crosses no wire) and a CRC32C of the header itself;
// a receive whose fingerprint differs fails with a *FingerprintError, one
// of another length with a *LengthError, and a frame that fails its
// checksum or does not parse fails with ErrFrame. Control frames carry
// the upper layer's own messages (dist's probes and failure notices) to
// Handlers.Control.
//
// Every TCP connection starts with the handshake of internal/handshake: both
// sides state the protocol version, the job id and their rank and, when
// the job has a token, prove they know it by HMAC-SHA256 over both sides'
// fresh nonces, before anything else is read. A peer that fails it is
// dropped after a bounded number of bytes, and nothing changes state. The
// handshake authenticates; it does not encrypt.
//
// A connection that fails or closes makes every pending and later
// transfer with that peer fail with a *PeerError naming the rank (its
// cause is ErrPeerClosed when the peer said goodbye with Close, as on
// Destroy or a clean exit), and Handlers.PeerDown hears it once: a dead
// process is noticed from its connection, not at a timeout. A peer that
// goes silent with its connection open (its host cut off, its process
// stopped) is noticed by NewTCP's heartbeats: nothing read from it for
// TCPOptions.PeerTimeout makes the *PeerError's cause a *SilentError
// naming its host (heartbeat.go). Other timeouts are the caller's: every
// blocking call takes a context.
//
// Two implementations: NewTCP, for any hosts, and NewInProc, a Mesh of
// endpoints in one process for tests, which injects loss (with
// retransmission), duplication and delay (and so reordering) from a seed
// (Faults), partitions between ranks (Partition, Heal) and a rank's death
// (Kill). Both pass the conformance suite of package transporttest.
//
// Same-host peers of a TCP endpoint (TCPOptions.SharedMemory on both
// sides) move large payloads through a shared-memory segment per pair and
// direction while the headers still go over TCP, so ordering, matching
// and failure detection do not change. Messages of 256 KiB or more go in
// fragments, so that the receiver copies one out while the sender copies
// the next in, and land in buffers recycled from messages nobody holds
// any more (spare.go), not in fresh memory faulted in page by page. Beyond that, shared memory is an
// optional capability: Endpoint.PeerMemory returns a PeerMemory (regions
// of this rank's memory the peers map, and theirs mapped here) only when
// some peer shares the host, and a user such as dist's NewSharedTensor
// asks for it and does without when it is absent.
//
// Two ranks exchanging a message over TCP:
//
//	ep, err := transport.NewTCP(ctx, transport.TCPOptions{
//		Rank: rank, Size: 2, Store: st, // st: a store both ranks reach
//		JobID: "job7", Token: token,
//	})
//	if err != nil {
//		return err
//	}
//	defer ep.Close()
//	key := transport.Key{Group: 1, Seq: 1}
//	if rank == 0 {
//		err = ep.Send(ctx, 1, key, fp, payload)
//	} else {
//		buf := make([]byte, len(payload))
//		r := ep.Post(0, transport.ExactMatch(0, key), fp, buf)
//		_, err = r.Wait(ctx) // buf holds the payload
//	}
//
// In a test, the same over an in-process mesh that loses a tenth of the
// transmissions:
//
//	m := transport.NewInProc(2, transport.Faults{Seed: 1, Loss: 0.1})
//	defer m.Close()
//	a, b := m.Endpoints[0], m.Endpoints[1]
package transport
