package data

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/godist/godist/tensor"
)

// Fashion-MNIST (Zalando Research): 28×28 grey images of clothing in ten
// classes, 60000 for training and 10000 for testing, as gzip-compressed IDX
// files.
const (
	// FashionMNISTDir is where the full dataset is installed on the
	// project's machines.
	FashionMNISTDir = "/usr/share/datasets/fashion-mnist"
	// FashionMNISTEnv names the environment variable the example
	// programs take their -data directory's default from. The package
	// itself does not read it: a caller passes the directory.
	FashionMNISTEnv = "GODIST_FASHION_MNIST"
	// FashionMNISTMean and FashionMNISTStd normalise the pixels (after
	// scaling them to [0, 1]), as the PyTorch anchor scripts do.
	FashionMNISTMean = 0.2860
	FashionMNISTStd  = 0.3530
)

// maxFashionFile bounds what a Fashion-MNIST IDX file may declare: twice
// the largest real one.
const maxFashionFile = 2 * 60000 * 28 * 28

// fashionFiles are the four file names, training then test, images then
// labels.
var fashionFiles = [4]string{
	"train-images-idx3-ubyte.gz",
	"train-labels-idx1-ubyte.gz",
	"t10k-images-idx3-ubyte.gz",
	"t10k-labels-idx1-ubyte.gz",
}

// LoadFashionMNIST reads the training (train) or test set from dir, which
// holds the files train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,
// t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz (or the part of
// them that is needed).
//
// images is a new float32 tensor N×1×28×28, normalised exactly as
// PyTorch's anchor script does it in float32: x/255, then
// (x-0.2860)/0.3530. It lies off the Go heap (tensor.NewOffHeap): a
// program that loads it once may keep it until it exits; one that is done
// with it earlier frees it with images.Release, after which neither it nor
// any view of it (a TensorDataset's Get returns views; its batches are
// copies) may be used. labels is a new int64 tensor of N classes in 0..9.
// Errors name the file: a missing file (wrapping fs.ErrNotExist),
// malformed IDX (wrapping ErrIDX), images that are not N×28×28 uint8, labels
// that are not N uint8 in 0..9, or counts that disagree.
func LoadFashionMNIST(dir string, train bool) (images, labels *tensor.Tensor, err error) {
	// Fashion-MNIST's largest file holds 60,000 images of 28×28 bytes
	// (47 MB); a header claiming far more is refused before any data is
	// read or inflated.
	imgName, lblName := fashionFiles[0], fashionFiles[1]
	if !train {
		imgName, lblName = fashionFiles[2], fashionFiles[3]
	}
	imgPath, lblPath := filepath.Join(dir, imgName), filepath.Join(dir, lblName)
	raw, err := ReadIDXFileLimited(imgPath, maxFashionFile)
	if err != nil {
		return nil, nil, err
	}
	if s := raw.Shape(); raw.DType() != tensor.Uint8 || len(s) != 3 || s[1] != 28 || s[2] != 28 {
		return nil, nil, fmt.Errorf("data: %s: images are %v%v, want uint8 N×28×28", imgPath, raw.DType(), s)
	}
	lraw, err := ReadIDXFileLimited(lblPath, maxFashionFile)
	if err != nil {
		return nil, nil, err
	}
	n := raw.Size(0)
	if s := lraw.Shape(); lraw.DType() != tensor.Uint8 || len(s) != 1 {
		return nil, nil, fmt.Errorf("data: %s: labels are %v%v, want uint8 N", lblPath, lraw.DType(), s)
	}
	if lraw.Size(0) != n {
		return nil, nil, fmt.Errorf("data: %s has %d images but %s has %d labels", imgPath, n, lblPath, lraw.Size(0))
	}

	lab := make([]int64, n)
	for i, c := range lraw.Uint8s() {
		if c > 9 {
			return nil, nil, fmt.Errorf("data: %s: label %d of example %d is not a class 0..9", lblPath, c, i)
		}
		lab[i] = int64(c)
	}
	return normalizeFashion(raw.Uint8s(), n), tensor.FromInt64(lab, n), nil
}

// normalizeFashion converts pixels to float32 N×1×28×28 the way
// torch.from_numpy(x).float().div_(255.0) followed by (x - 0.2860) / 0.3530
// does on the CPU: every step rounds to float32, and the Python float
// constants are rounded to float32 first (they are wrapped scalars, which
// take the tensor's dtype).
func normalizeFashion(px []uint8, n int) *tensor.Tensor {
	// Round the Python floats (float64) to float32 at run time, as torch
	// does, rather than rounding the decimal constants once.
	mean64, std64 := float64(FashionMNISTMean), float64(FashionMNISTStd)
	scale, mean, std := float32(255.0), float32(mean64), float32(std64)
	// A table of the 256 possible results, computed step by step.
	var lut [256]float32
	for v := range lut {
		x := float32(v) / scale
		x = x - mean
		lut[v] = x / std
	}
	// Off the Go heap: a dataset on the heap would double the memory the
	// collector lets training steps cycle through (see tensor.NewOffHeap).
	t := tensor.NewOffHeap(tensor.Float32, n, 1, 28, 28)
	out := t.Float32s()
	for i, v := range px {
		out[i] = lut[v]
	}
	return t
}

// FindFashionMNIST returns the directory to load Fashion-MNIST from: the
// full dataset in FashionMNISTDir when all four files are there (full is
// true), else the subset the repository ships (SubsetDir; full is false).
// dir is "" when neither is found.
func FindFashionMNIST() (dir string, full bool) {
	if hasFashionFiles(FashionMNISTDir) {
		return FashionMNISTDir, true
	}
	d, err := SubsetDir()
	if err != nil {
		return "", false
	}
	return d, false
}

// SubsetDir returns the directory of the Fashion-MNIST subset shipped with
// the repository (testdata/fashion-mnist: the first 3000 training and
// 1000 test examples): testdata/fashion-mnist beside a go.mod in the
// working directory or the nearest parent that has one. So it works from
// tests (which run in their package's directory) and from programs run
// anywhere inside the repository; elsewhere, pass LoadFashionMNIST the
// directory. The error wraps fs.ErrNotExist when nothing is found.
func SubsetDir() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("data: looking for the Fashion-MNIST subset: %w", err)
	}
	for d := wd; ; {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			sub := filepath.Join(d, "testdata", "fashion-mnist")
			if hasFashionFiles(sub) {
				return sub, nil
			}
		}
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	return "", fmt.Errorf("data: no testdata/fashion-mnist beside a go.mod in %s or its parents (outside the repository, name the directory): %w", wd, fs.ErrNotExist)
}

// hasFashionFiles reports whether dir holds the four files as regular files.
func hasFashionFiles(dir string) bool {
	for _, name := range fashionFiles {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !st.Mode().IsRegular() {
			return false
		}
	}
	return true
}
