package dist

import (
	"errors"
	"os"
	"strconv"

	"github.com/godist/godist/internal/launch/errorfile"
)

// ErrorFileEnv is the variable in which a launcher (godist run,
// spawn.Run) gives each worker the path of its error file; RecordError
// writes it. torchrun's name for it, TORCHELASTIC_ERROR_FILE, is set to
// the same path and read when this one is unset.
const ErrorFileEnv = errorfile.Env

// RecordError tells the launcher why this worker is about to fail, so
// that its root-cause report can tell the rank that failed on its own
// from those that failed because they lost it. Call it on the fatal path,
// before exiting:
//
//	if err := train(ctx, g); err != nil {
//		dist.RecordError(err)
//		log.Fatal(err)
//	}
//
// It writes a small JSON file (rank, message, kind, the peer the error
// blames, the time to the nanosecond, by which the launcher orders the
// failures of a host; torchelastic reads it too) where GODIST_ERROR_FILE
// (or TORCHELASTIC_ERROR_FILE) says, atomically, replacing an earlier
// record. The kind comes from dist's typed errors, found with errors.As:
// *RankError is "peer_lost" and blames the rank that is gone;
// *AbortError is "aborted" and blames the rank that failed the group;
// *TimeoutError is "timeout" and blames the rank it waited on, when there
// was one (or the rank its wait chain ends at: one that stopped, or the
// store's host when the store did not answer); *DesyncError is "desync",
// naming the other rank but blaming neither; anything else is "other". It does nothing, and returns nil, when err is nil or no
// launcher asked for a file; otherwise it returns the writing's error.
func RecordError(err error) error {
	if err == nil {
		return nil
	}
	path := os.Getenv(errorfile.Env)
	if path == "" {
		path = os.Getenv(errorfile.TorchEnv)
	}
	if path == "" {
		return nil
	}
	rank := -1
	if r, e := strconv.Atoi(os.Getenv("RANK")); e == nil && r >= 0 {
		rank = r
	}
	rec := errorRecord(err, rank)
	rec.PID = os.Getpid()
	return errorfile.Write(path, rec)
}

// errorRecord classifies err, the error of rank self (-1 unknown), by
// dist's typed errors.
func errorRecord(err error, self int) errorfile.Record {
	r := errorfile.Record{Rank: self, Kind: errorfile.Other, Peer: -1, Message: err.Error()}
	var (
		re *RankError
		ae *AbortError
		te *TimeoutError
		de *DesyncError
	)
	switch {
	case errors.As(err, &re):
		r.Kind, r.Peer = errorfile.PeerLost, re.Rank
	case errors.As(err, &ae):
		r.Kind, r.Peer = errorfile.Aborted, ae.Rank
	case errors.As(err, &de):
		// Both sides of a desync fail with it; the other is whichever
		// of the two is not this rank.
		r.Kind, r.Peer = errorfile.Desync, de.Peer
		if de.Peer == self {
			r.Peer = de.Rank
		}
	case errors.As(err, &te):
		r.Kind = errorfile.Timeout
		switch {
		case te.Cause != "" && len(te.Chain) > 0 && te.Chain[len(te.Chain)-1] != self:
			// The rank the waits lead to, not this rank's own peer (a
			// cycle through this rank blames the peer it waited on).
			r.Peer = te.Chain[len(te.Chain)-1]
		case len(te.Waiting) == 1:
			r.Peer = te.Waiting[0]
		}
	}
	return r
}
