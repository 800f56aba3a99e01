package dcp

import (
	"slices"

	"github.com/godist/godist/tensor"
)

// Entry describes one tensor of a committed checkpoint.
type Entry struct {
	DType tensor.DType
	Shape []int // the global shape
}

// Entries lists the tensors of the checkpoint committed in dir, by name,
// so that a loader can ask for what is there (an optimizer's state, say).
// Its errors are Load's: ErrNoCheckpoint, ErrCorrupt.
func Entries(dir string) (map[string]Entry, error) {
	md, err := readMetadata(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Entry, len(md.Entries))
	for name, e := range md.Entries {
		d, err := tensor.ParseDType(e.DType)
		if err != nil {
			return nil, err
		}
		out[name] = Entry{DType: d, Shape: slices.Clone(e.Shape)}
	}
	return out, nil
}
