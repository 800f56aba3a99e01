package main

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/godist/godist/checkpoint"
	"github.com/godist/godist/data"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
)

// dump writes, for tools/peers/gpt_twin.py: the two splits (train.bin,
// val.bin), the initial weights under PyTorch's names (init.safetensors),
// the offsets of every step's global batch of windows (batches.bin: int64
// little-endian, steps × world·batch) and the configuration (config.json).
func dump(c config, m *models.GPT, corpus *data.TextCorpus, w *data.RandomWindows) error {
	if err := os.MkdirAll(c.dump, 0o755); err != nil {
		return err
	}
	for name, s := range map[string]data.Split{"train.bin": data.Train, "val.bin": data.Validation} {
		if err := os.WriteFile(filepath.Join(c.dump, name), corpus.Data(s).Bytes(), 0o644); err != nil {
			return err
		}
	}
	if err := checkpoint.SaveFile(filepath.Join(c.dump, "init.safetensors"), nn.StateDict(m), nil); err != nil {
		return err
	}
	// Every rank's share of a step's global batch, in rank order.
	opt := w.Options()
	buf := make([]byte, 0, c.Steps*opt.World*opt.BatchSize*8)
	for step := range c.Steps {
		for r := range opt.World {
			rw, err := corpus.RandomWindows(data.Train, data.WindowOptions{BatchSize: opt.BatchSize, Block: opt.Block, Seed: opt.Seed, World: opt.World, Rank: r})
			if err != nil {
				return err
			}
			for _, s := range rw.Starts(step) {
				buf = binary.LittleEndian.AppendUint64(buf, uint64(s))
			}
		}
	}
	if err := os.WriteFile(filepath.Join(c.dump, "batches.bin"), buf, 0o644); err != nil {
		return err
	}
	cfg, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.dump, "config.json"), cfg, 0o644)
}
