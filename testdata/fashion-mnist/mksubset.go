//go:build ignore

// mksubset writes the Fashion-MNIST subset shipped in this directory: the
// first 3000 training and the first 1000 test examples of the full dataset,
// as gzip-compressed IDX files with the original names. Run from the
// repository root:
//
//	go run ./testdata/fashion-mnist/mksubset.go [-src /usr/share/datasets/fashion-mnist] [-dst testdata/fashion-mnist]
//
// The output is deterministic (no gzip name or time stamp).
package main

import (
	"compress/gzip"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/godist/godist/data"
)

func main() {
	src := flag.String("src", data.FashionMNISTDir, "directory of the full dataset")
	dst := flag.String("dst", filepath.Join("testdata", "fashion-mnist"), "output directory")
	nTrain := flag.Int("train", 3000, "training examples to keep")
	nTest := flag.Int("test", 1000, "test examples to keep")
	flag.Parse()
	for _, f := range []struct {
		name string
		n    int
	}{
		{"train-images-idx3-ubyte.gz", *nTrain},
		{"train-labels-idx1-ubyte.gz", *nTrain},
		{"t10k-images-idx3-ubyte.gz", *nTest},
		{"t10k-labels-idx1-ubyte.gz", *nTest},
	} {
		if err := subset(filepath.Join(*src, f.name), filepath.Join(*dst, f.name), f.n); err != nil {
			log.Fatal(err)
		}
	}
}

func subset(src, dst string, n int) error {
	t, err := data.ReadIDXFile(src)
	if err != nil {
		return err
	}
	if t.Size(0) < n {
		return fmt.Errorf("%s has only %d examples", src, t.Size(0))
	}
	t = t.Narrow(0, 0, n)
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	zw, err := gzip.NewWriterLevel(f, gzip.BestCompression)
	if err != nil {
		return err
	}
	if err := data.WriteIDX(zw, t); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Printf("%s: %v, %d bytes\n", dst, t.Shape(), fileSize(dst))
	return nil
}

func fileSize(p string) int64 {
	st, err := os.Stat(p)
	if err != nil {
		return -1
	}
	return st.Size()
}
