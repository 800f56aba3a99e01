package launch

import "github.com/godist/godist/internal/launch/errorfile"

// The error file's format lives in package errorfile, which a worker
// links without this package's init (see its doc). These names are the
// part of it a launcher uses, so that one reads, passes on and judges
// the records through this package alone.

// ErrorFileEnv and TorchErrorFileEnv name the error file for a worker
// (errorfile.Env, errorfile.TorchEnv); [ErrorFileVars] sets both.
const (
	ErrorFileEnv      = errorfile.Env
	TorchErrorFileEnv = errorfile.TorchEnv
)

// Record is a worker's error file ([errorfile.Record]).
type Record = errorfile.Record

// Kind says what sort of failure a worker recorded ([errorfile.Kind]).
type Kind = errorfile.Kind

// The kinds of failure, as [errorfile.PeerLost] and the others.
const (
	PeerLost = errorfile.PeerLost
	Aborted  = errorfile.Aborted
	Timeout  = errorfile.Timeout
	Desync   = errorfile.Desync
	Other    = errorfile.Other
)

// ReadRecord reads the record a worker left at path ([errorfile.Read]):
// an error that wraps fs.ErrNotExist when it left none.
func ReadRecord(path string) (*Record, error) { return errorfile.Read(path) }
