package dcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/godist/godist/tensor"
)

// The checkpoint directory:
//
//	.metadata                 the commit record (JSON, below), written last
//	__<rank>_<id>.safetensors the pieces group rank <rank> wrote in save <id>
//
// .metadata:
//
//	{"version": 1, "save_id": "9f0c...", "world_size": 4,
//	 "files": {"__0_9f0c....safetensors": {"rank": 0, "size": 1234, "crc32c": 305419896}, ...},
//	 "entries": {"fc.weight": {"dtype": "float32", "shape": [4, 3],
//	   "pieces": [{"file": "__0_9f0c....safetensors", "offsets": [0], "lengths": [3], "flat": true}, ...]}}}
//
// A piece is a hyper-rectangle of the global tensor (offsets and lengths
// per dimension) or, when flat, a range of its row-major flattening; in
// its file it is the tensor named like the entry, of the piece's shape.
// The checksum is CRC-32C of the whole file.

// MetadataFile is the name of the commit record in a checkpoint directory.
const MetadataFile = ".metadata"

// Version is the metadata format version written and read.
const Version = 1

// MaxMetadataSize bounds the metadata file read by Load.
const MaxMetadataSize = 256 << 20

type metadata struct {
	Version   int                  `json:"version"`
	SaveID    string               `json:"save_id"`
	WorldSize int                  `json:"world_size"`
	Files     map[string]fileMeta  `json:"files"`
	Entries   map[string]entryMeta `json:"entries"`
}

type fileMeta struct {
	Rank   int    `json:"rank"`
	Size   int64  `json:"size"`
	CRC32C uint32 `json:"crc32c"`
}

type entryMeta struct {
	DType  string      `json:"dtype"`
	Shape  []int       `json:"shape"`
	Pieces []pieceMeta `json:"pieces"`
}

type pieceMeta struct {
	File    string `json:"file"`
	Offsets []int  `json:"offsets"`
	Lengths []int  `json:"lengths"`
	Flat    bool   `json:"flat,omitempty"`
}

// The kinds of error Save and Load return; test with errors.Is.
var (
	// ErrNoCheckpoint: the directory holds no committed checkpoint.
	ErrNoCheckpoint = errors.New("dcp: no committed checkpoint")
	// ErrCorrupt: the metadata or a shard file is malformed, or a file's
	// checksum does not match.
	ErrCorrupt = errors.New("dcp: corrupted checkpoint")
	// ErrMismatch: the checkpoint does not hold what the state asks for
	// (a missing tensor, another dtype or shape, elements not saved).
	ErrMismatch = errors.New("dcp: checkpoint does not match the state")
	// ErrInvalidState: the state passed to Save or Load is malformed.
	ErrInvalidState = errors.New("dcp: invalid state")
)

// kindError is an error of one of the kinds above, with its own message
// and possibly a cause.
type kindError struct {
	kind  error
	msg   string
	cause error
}

func (e *kindError) Error() string {
	if e.cause != nil {
		return "dcp: " + e.msg + ": " + e.cause.Error()
	}
	return "dcp: " + e.msg
}

func (e *kindError) Unwrap() []error {
	if e.cause != nil {
		return []error{e.kind, e.cause}
	}
	return []error{e.kind}
}

func errorf(kind, cause error, format string, args ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, args...), cause: cause}
}

var (
	saveIDPattern = regexp.MustCompile(`^[0-9a-f]{1,32}$`)
	filePattern   = regexp.MustCompile(`^__([0-9]{1,9})_([0-9a-f]{1,32})\.safetensors$`)
)

func shardFile(rank int, saveID string) string {
	return "__" + strconv.Itoa(rank) + "_" + saveID + ".safetensors"
}

// readMetadata reads and validates dir's commit record.
func readMetadata(dir string) (*metadata, error) {
	path := filepath.Join(dir, MetadataFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, errorf(ErrNoCheckpoint, nil, "no committed checkpoint in %s (no %s)", dir, MetadataFile)
	}
	if err != nil {
		return nil, errorf(ErrNoCheckpoint, err, "no committed checkpoint in %s", dir)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxMetadataSize+1))
	if err != nil {
		return nil, errorf(ErrCorrupt, err, "reading %s", path)
	}
	if len(b) > MaxMetadataSize {
		return nil, errorf(ErrCorrupt, nil, "%s is over the %d-byte limit", path, MaxMetadataSize)
	}
	m, err := decodeMetadata(b)
	if err != nil {
		return nil, errorf(ErrCorrupt, err, "corrupted metadata %s", path)
	}
	return m, nil
}

// decodeMetadata parses and validates a commit record: everything Load
// later trusts (file names, ranks, shapes, piece bounds) is checked here.
func decodeMetadata(b []byte) (*metadata, error) {
	var m metadata
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("metadata JSON: %w", err)
	}
	if m.Version != Version {
		return nil, fmt.Errorf("metadata version %d, want %d", m.Version, Version)
	}
	if !saveIDPattern.MatchString(m.SaveID) {
		return nil, fmt.Errorf("save id %q is not 1 to 32 hex digits", m.SaveID)
	}
	if m.WorldSize < 1 || m.WorldSize > 1<<24 {
		return nil, fmt.Errorf("world size %d", m.WorldSize)
	}
	for name, f := range m.Files {
		if f.Rank < 0 || f.Rank >= m.WorldSize {
			return nil, fmt.Errorf("file %q: rank %d outside the world of %d", name, f.Rank, m.WorldSize)
		}
		if name != shardFile(f.Rank, m.SaveID) {
			return nil, fmt.Errorf("file %q of rank %d: want %q for save %s", name, f.Rank, shardFile(f.Rank, m.SaveID), m.SaveID)
		}
		if f.Size < 8 {
			return nil, fmt.Errorf("file %s: size %d", name, f.Size)
		}
	}
	for name, e := range m.Entries {
		d, err := tensor.ParseDType(e.DType)
		if err != nil || d.Size() == 0 {
			return nil, fmt.Errorf("tensor %q: dtype %q", name, e.DType)
		}
		if _, err := numel(e.Shape); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		for i, p := range e.Pieces {
			if _, ok := m.Files[p.File]; !ok {
				return nil, fmt.Errorf("tensor %q: piece %d is in file %q, which the metadata does not list", name, i, p.File)
			}
			r := region{global: e.Shape, offsets: p.Offsets, lengths: p.Lengths, flat: p.Flat}
			if err := r.check(); err != nil {
				return nil, fmt.Errorf("tensor %q: piece %d (file %s): %w", name, i, p.File, err)
			}
		}
	}
	return &m, nil
}

// writeMetadata commits m to dir atomically: a temporary file, synced,
// renamed over MetadataFile, and the directory synced.
func writeMetadata(dir string, m *metadata) (err error) {
	b, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, MetadataFile+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(append(b, '\n')); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, MetadataFile)); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes renames and creations in dir durable. Systems that cannot
// sync a directory (the error says so) are let through.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) && !errors.Is(err, errors.ErrUnsupported) {
		return err
	}
	return nil
}
