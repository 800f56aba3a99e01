package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestZZLab(t *testing.T) {
	rate := 1000 * Mbit
	if os.Getenv("LAB_RATE") == "10G" {
		rate = 10000 * Mbit
	}
	hosts, per := 2, 2
	if os.Getenv("LAB_SHAPE") == "4x1" {
		hosts, per = 4, 1
	}
	c := Start(t, Config{Hosts: hosts, Rate: rate, ShareCPUs: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	godist, _ := buildBins(ctx, t)
	env := jobEnv()
	ops := os.Getenv("LAB_OPS")
	if ops == "" {
		ops = `"all_reduce"`
	}
	sizes := os.Getenv("LAB_SIZES")
	if sizes == "" {
		sizes = "8,1048576,16777216"
	}
	env = append(env, `GODIST_BENCH_CONFIG={"ops":[`+ops+`],"sizes":[`+sizes+`],"dtype":"float32","warmup":3,"min_iters":5,"max_iters":200,"target":1000000000,"timeout":60000000000}`)
	outs := make([]*bytes.Buffer, hosts)
	cmds := make([]*exec.Cmd, hosts)
	for i := hosts - 1; i >= 0; i-- {
		cmd := c.Command(ctx, i, godist, "run", "--nnodes", fmt.Sprint(hosts), "--node-rank", fmt.Sprint(i),
			"--master-addr", c.Host(0).Addr.String(), "--master-port", "29500", "--nproc-per-node", fmt.Sprint(per),
			godist, "__bench-worker")
		cmd.Env = env
		outs[i] = &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("node %d: %v", i, err)
		}
	}
	for _, l := range strings.Split(outs[0].String(), "\n") {
		if strings.Contains(l, "lat_us_median") {
			var op, algo string
			var size int
			var med, pred float64
			fmt.Sscanf(extract(l, `"op":`), "%q", &op)
			fmt.Sscanf(extract(l, `"size":`), "%d", &size)
			fmt.Sscanf(extract(l, `"algo":`), "%q", &algo)
			fmt.Sscanf(extract(l, `"lat_us_median":`), "%g", &med)
			fmt.Sscanf(extract(l, `"pred_us":`), "%g", &pred)
			t.Logf("%s %d %s median %.1f us pred %.1f us (%.2f) busbw-ish %.3f GB/s", op, size, algo, med, pred, pred/med, float64(size)/med/1e3)
		}
	}
	if t.Failed() {
		t.Log(outs[0].String(), outs[1].String())
	}
}

func extract(l, key string) string {
	i := strings.Index(l, key)
	if i < 0 {
		return ""
	}
	return l[i+len(key):]
}
