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
