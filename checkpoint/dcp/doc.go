// Package dcp saves and loads distributed checkpoints: each rank writes
// the pieces of the tensors it holds (FSDP's flat shards, ZeRO's
// partitions, DDP's replicas) and a load fills whatever pieces the
// loading ranks hold, at any world size and sharding, as PyTorch's
// torch.distributed.checkpoint does.
//
//	state := dcp.State{
//		"fc.weight": dcp.Flat([]int{512, 256}, start, myShard), // 1-D piece of the flattened tensor
//		"fc.bias":   dcp.Whole(bias),                          // replicated: written once
//	}
//	if err := dcp.Save(ctx, "ckpt/step-1000", state, g); err != nil { ... }
//	...
//	// Later, at another world size and sharding, or in one process (g nil):
//	err := dcp.Load(ctx, "ckpt/step-1000", state, g)
//
// A checkpoint is a directory of safetensors files, one per rank that
// wrote something (__<rank>_<save id>.safetensors, readable by
// package checkpoint and any safetensors reader), and a JSON commit record,
// .metadata, that lists every tensor's dtype, global shape and pieces, and
// every file's size and CRC-32C (see meta.go). The record is written last,
// atomically: a directory without it holds no checkpoint, and a save that
// fails or is interrupted leaves the previous checkpoint there whole.
//
// AsyncSave copies the local pieces and writes them in the background,
// over a subgroup of its own, so that training goes on meanwhile.
//
// Package dcp sits above dist and checkpoint; package checkpoint itself
// knows nothing of processes.
package dcp
