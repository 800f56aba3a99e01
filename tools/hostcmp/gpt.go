package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// The tiny GPT across hosts (--train gpt,gpt-auto,gpt-fsdp,gpt-hybrid):
// examples/tinygpt under godist run on each host (DDP, FSDP's full
// sharding, or hybrid sharding: shards inside a host, replicas across
// hosts, from the group's topology) beside its PyTorch twin
// (peers/gpt_twin.py: the same model, initial weights and batches, DDP
// over gloo) under torchrun on each host. The twin reads what tinygpt
// --dump wrote: before a lab's rounds, one untimed godist run of the lab
// writes it (the lab's world, its batches).

// gptModels are --train's GPT models, by the strategy godist trains with
// (gpt-auto: DDP whose buckets are sized for the link, --auto-bucket-caps).
var gptModels = map[string]string{"gpt": "ddp", "gpt-auto": "ddp", "gpt-fsdp": "fsdp", "gpt-hybrid": "hybrid"}

// isGPT reports whether model is one of gptModels.
func isGPT(model string) bool {
	_, ok := gptModels[model]
	return ok
}

// gptFlags are tinygpt's flags for a run of steps: the default model
// (4 blocks of width 128, 128-byte context, 16 sequences a rank a step),
// one evaluation at the end, nothing written.
func gptFlags(steps int) []string {
	return []string{"--steps", strconv.Itoa(steps), "--warmup", strconv.Itoa(max(1, steps/10)),
		"--eval-every", strconv.Itoa(steps), "--eval-batches", "2", "--sample", "0", "--checkpoint", "", "--plot", ""}
}

// gptArgs is godist's program for model: tinygpt with its strategy (and
// with DDP, the bucket caps of run).
func gptArgs(t tools, model string, run trainRun) []string {
	args := append([]string{t.TinyGPT}, gptFlags(run.GPTSteps)...)
	args = append(args, "--strategy", gptModels[model], "--data", t.Corpus)
	if run.BucketMB > 0 && gptModels[model] == "ddp" {
		mb := strconv.FormatFloat(run.BucketMB, 'g', -1, 64)
		args = append(args, "--bucket-cap-mb", mb, "--first-bucket-mb", mb)
	}
	if model == "gpt-auto" {
		args = append(args, "--auto-bucket-caps")
	}
	return args
}

// twinArgs is PyTorch's program: the twin on the lab's dump.
func twinArgs(t tools, run trainRun) []string {
	n := strconv.Itoa(run.GPTSteps)
	args := []string{filepath.Join(t.Scripts, "gpt_twin.py"), run.GPTDump, "--steps", n, "--eval-every", n}
	if run.BucketMB > 0 {
		args = append(args, "--bucket-cap-mb", strconv.FormatFloat(run.BucketMB, 'g', -1, 64))
	}
	return args
}

// gptDump runs tinygpt once on l under godist run (untimed: it also warms
// the hosts' page caches with the corpus) with --dump into a fresh
// directory under tmp, and returns that directory: the config, data,
// initial weights and batches of l's world, for the twin.
func gptDump(ctx context.Context, l *lab, t tools, run trainRun, port int, tmp string, timeout time.Duration) (string, error) {
	dir, err := os.MkdirTemp(tmp, "gpt-dump-")
	if err != nil {
		return "", err
	}
	os.Chmod(dir, 0o755)
	args := append(gptArgs(t, "gpt", run), "--dump", dir)
	out, err := l.run(ctx, godistOnHosts(t, l, port, args...), timeout)
	if err != nil {
		return "", fmt.Errorf("tinygpt --dump: %w", err)
	}
	if _, err := parseTrainResult(out); err != nil {
		return "", fmt.Errorf("tinygpt --dump: %w", err)
	}
	for _, f := range []string{"config.json", "train.bin", "val.bin", "init.safetensors", "batches.bin"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return "", fmt.Errorf("tinygpt --dump wrote no %s", f)
		}
	}
	return dir, nil
}

// checkModels returns an error naming the first of models --train does
// not know.
func checkModels(models []string) error {
	for _, m := range models {
		if m != "mlp" && m != "lenet" && !isGPT(m) {
			return fmt.Errorf("--train: unknown model %q (want mlp, lenet, gpt, gpt-auto, gpt-fsdp, gpt-hybrid)", m)
		}
	}
	return nil
}

// anyGPT reports whether models has a GPT model.
func anyGPT(models []string) bool { return slices.ContainsFunc(models, isGPT) }
