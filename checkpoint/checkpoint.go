package checkpoint

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/godist/godist/internal/boundedio"
	"github.com/godist/godist/tensor"
)

// littleEndian is whether tensor bytes are already the format's byte
// order. The format and Bytes agree on every platform Go supports in this
// project; a big-endian host is refused rather than silently wrong.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

var errBigEndian = errors.New("checkpoint: big-endian hosts are not supported")

// Save writes tensors and metadata to w in the safetensors format. The
// tensors are written sorted by name, each as its contiguous bytes (a
// non-contiguous tensor is copied once; a contiguous one is written
// straight from its storage). metadata may be nil; it is stored as the
// header's "__metadata__" object, together with a CRC-32C checksum of each
// tensor's data ("godist.crc32c.NAME") and one of the rest of the header
// ("godist.crc32c"), which Load checks. Those keys are Save's own: any in
// metadata (a copy of an older file's) are replaced. Save only reads the
// maps and tensors.
//
// Every dtype of package tensor is supported. A nil or unsized tensor, or
// the reserved name "__metadata__", is an error, and nothing is written;
// errors from w are returned wrapped.
func Save(w io.Writer, tensors map[string]*tensor.Tensor, metadata map[string]string) error {
	if !littleEndian {
		return errBigEndian
	}
	names, ts, err := checkTensors(tensors)
	if err != nil {
		return err
	}
	h := encodeHeader(names, ts, withChecksums(metadata, names, ts))
	if len(h) > MaxHeaderSize {
		return fmt.Errorf("checkpoint: header of %d bytes exceeds the %d-byte limit", len(h), MaxHeaderSize)
	}
	var lb [8]byte
	binary.LittleEndian.PutUint64(lb[:], uint64(len(h)))
	if _, err := w.Write(lb[:]); err != nil {
		return fmt.Errorf("checkpoint: writing header: %w", err)
	}
	if _, err := w.Write(h); err != nil {
		return fmt.Errorf("checkpoint: writing header: %w", err)
	}
	for i, t := range ts {
		if b := t.Bytes(); len(b) > 0 {
			if _, err := w.Write(b); err != nil {
				return fmt.Errorf("checkpoint: writing tensor %q: %w", names[i], err)
			}
		}
	}
	return nil
}

// Load reads a safetensors stream and returns its tensors (new contiguous
// tensors that belong to the caller) and its metadata (nil if the file
// has none), less the checksums Save adds. The whole stream must be one
// file: data after the last tensor is an error.
//
// If the file has Save's checksums, Load checks every tensor's data and
// the header against them; a file without checksums (written by PyTorch,
// say) loads unchecked. Malformed input gives an error wrapping ErrFormat
// (a *FormatError; a truncated stream also wraps io.ErrUnexpectedEOF, a
// checksum mismatch ErrCorrupt); errors from r are returned wrapped. Memory use is bounded by the input: when r's remaining
// length is known (an *os.File, *bytes.Reader, *bytes.Buffer,
// *strings.Reader, or anything with Len() int) the header's claims are
// checked against it before tensors are allocated and data is read straight
// into them; otherwise the data section is read as it arrives and then
// copied into the tensors.
func Load(r io.Reader) (map[string]*tensor.Tensor, map[string]string, error) {
	if !littleEndian {
		return nil, nil, errBigEndian
	}
	left := remaining(r)
	n, err := readHeaderLen(r, left)
	if err != nil {
		return nil, nil, err
	}
	h, err := boundedio.ReadGrowing(r, int(n))
	if err != nil {
		return nil, nil, readErr(err, "header: got %d of %d bytes", len(h), n)
	}
	dataLen := int64(-1)
	if left >= 0 {
		dataLen = left - 8 - int64(n)
	}
	entries, meta, total, err := decodeHeader(h, dataLen)
	if err != nil {
		return nil, nil, err
	}
	sums, meta, err := checkChecksums(meta, entries)
	if err != nil {
		return nil, nil, err
	}

	out := make(map[string]*tensor.Tensor, len(entries))
	if dataLen >= 0 {
		// Known length, already checked: read straight into the tensors.
		for _, e := range entries {
			t := tensor.New(e.dtype, e.shape...)
			if b := t.Bytes(); len(b) > 0 {
				if m, err := io.ReadFull(r, b); err != nil {
					return nil, nil, readErr(err, "data of tensor %q: got %d of %d bytes", e.name, m, len(b))
				}
			}
			if err := checkData(sums, e, t.Bytes()); err != nil {
				return nil, nil, err
			}
			out[e.name] = t
		}
		return out, meta, nil
	}
	data, err := boundedio.ReadGrowing(r, int(total))
	if err != nil {
		return nil, nil, readErr(err, "data: got %d of %d bytes", len(data), total)
	}
	var one [1]byte
	if m, _ := io.ReadFull(r, one[:]); m != 0 {
		return nil, nil, formatErr("", nil, "data continues after the %d bytes the tensors cover", total)
	}
	for _, e := range entries {
		if err := checkData(sums, e, data[e.begin:e.end]); err != nil {
			return nil, nil, err
		}
		out[e.name] = tensor.FromBytes(e.dtype, data[e.begin:e.end], e.shape...)
	}
	return out, meta, nil
}

// remaining returns how many bytes r has left, or -1 if that is unknown.
func remaining(r io.Reader) int64 {
	switch v := r.(type) {
	case interface{ Len() int }:
		return int64(v.Len())
	case *os.File:
		st, err := v.Stat()
		if err != nil || !st.Mode().IsRegular() {
			return -1
		}
		pos, err := v.Seek(0, io.SeekCurrent)
		if err != nil || pos > st.Size() {
			return -1
		}
		return st.Size() - pos
	}
	return -1
}

// SaveFile writes the checkpoint to path atomically: it writes a temporary
// file in the same directory, syncs it, and renames it over path, so that
// path holds either the old checkpoint or the complete new one, never a
// part. The file is created with mode 0644. On error the temporary file is
// removed and path is untouched. An empty path, or one that names a
// directory, is an error, and nothing is written.
func SaveFile(path string, tensors map[string]*tensor.Tensor, metadata map[string]string) (err error) {
	dir, base := filepath.Split(path)
	if base == "" {
		return fmt.Errorf("checkpoint: SaveFile: %q names no file", path)
	}
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := Save(bw, tensors, metadata); err != nil {
		return fmt.Errorf("%w (file %s)", err, path)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("checkpoint: writing %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	// Make the rename itself durable; not all systems can sync a directory.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// LoadFile is Load on the named file. Errors name the file.
func LoadFile(path string) (map[string]*tensor.Tensor, map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	ts, meta, err := Load(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return ts, meta, nil
}
