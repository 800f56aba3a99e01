// Package checkpoint saves and loads state dicts (named tensors) as
// safetensors files, the format of Hugging Face's safetensors library, so
// that a checkpoint written here loads in PyTorch or numpy and back.
//
//	err := checkpoint.SaveFile("model.safetensors", model.StateDict(),
//		map[string]string{"epoch": "3"})
//	...
//	tensors, meta, err := checkpoint.LoadFile("model.safetensors")
//
// A file is an 8-byte little-endian header length N, N bytes of JSON that
// map each tensor's name to its dtype, shape and byte range, and the data:
// every tensor's elements, little-endian and row-major, back to back (see
// format.go). Save writes the tensors sorted by name, so the same state
// dict always gives the same bytes; SaveFile writes a temporary file and
// renames it, so a crash never leaves a half-written checkpoint behind.
//
// Save stores a CRC-32C checksum of every tensor's data, and one of the
// rest of the header, as strings in the header's metadata, where other
// readers (PyTorch's safetensors among them) ignore them. Load checks
// them, so a flipped bit gives an error wrapping ErrCorrupt that names the
// tensor, rather than a corrupted weight; a file without checksums, such
// as one PyTorch wrote, loads unchecked. A tool that rewrites a file's
// tensors but copies its metadata (save_file(..., metadata=f.metadata()))
// keeps checksums that no longer match: drop the "godist.crc32c" keys.
//
// Load checks everything it reads before trusting it: the header length,
// the JSON, the dtypes, the shapes and that the byte ranges cover the data
// exactly, without gaps or overlaps. Bad input gives an error wrapping
// ErrFormat (a *FormatError naming the tensor and the problem), never a
// panic, and never an allocation much larger than the input.
package checkpoint
