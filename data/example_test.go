package data_test

import (
	"fmt"

	"github.com/godist/godist/data"
)

func Example() {
	dir, err := data.SubsetDir() // the shipped subset; FindFashionMNIST prefers the full set
	if err != nil {
		panic(err)
	}
	images, labels, err := data.LoadFashionMNIST(dir, false)
	if err != nil {
		panic(err)
	}
	defer images.Release() // it lies off the Go heap
	ds := data.NewTensorDataset(images, labels)
	ld := data.NewLoader(ds, data.LoaderOptions{BatchSize: 64, Shuffle: true, Seed: 0, Prefetch: 2})
	fmt.Println(ds.Len(), "examples,", ld.Len(), "batches")
	n := 0
	for b := range ld.Batches() {
		if n == 0 {
			fmt.Println(b[0].DType(), b[0].Shape(), b[1].DType(), b[1].Shape())
		}
		n += b[1].Size(0)
	}
	fmt.Println(n, "examples seen")
	// Output:
	// 1000 examples, 16 batches
	// float32 [64 1 28 28] int64 [64]
	// 1000 examples seen
}

func ExampleTextCorpus() {
	// Training on Go's own source: root, err := data.GoRootSource().
	c, err := data.NewTextCorpus("../testdata/gosrc", data.TextCorpusOptions{}) // *.go, 1 in 10 files for validation
	if err != nil {
		panic(err)
	}
	fmt.Println(c.NumFiles(data.Train), "files,", c.Len(data.Train), "bytes for training")
	fmt.Println(c.NumFiles(data.Validation), "files,", c.Len(data.Validation), "bytes for validation")

	// Rank 1 of 2, 4 windows of 64 bytes per step: its half of the step's
	// global batch of 8.
	w, err := c.RandomWindows(data.Train, data.WindowOptions{BatchSize: 4, Block: 64, Seed: 1, World: 2, Rank: 1})
	if err != nil {
		panic(err)
	}
	x, y := w.Batch(0) // step 0
	fmt.Println(x.DType(), x.Shape(), y.Shape())

	ev, err := c.EvalWindows(data.Validation, data.EvalOptions{BatchSize: 4, Block: 64, World: 2, Rank: 1, MaxBatches: 50})
	if err != nil {
		panic(err)
	}
	n := 0
	for x, y := range ev.All() {
		_, _ = x, y // loss on this rank's share; all-reduce the sums
		n++
	}
	fmt.Println(n, "evaluation batches")
	// Output:
	// 26 files, 162110 bytes for training
	// 2 files, 35330 bytes for validation
	// int64 [4 64] [4 64]
	// 50 evaluation batches
}
