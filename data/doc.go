// Package data provides what torch.utils.data does: datasets, samplers and a
// loader that turns them into batches, plus readers for the IDX format and
// for Fashion-MNIST.
//
// A Dataset is indexed examples, each a tuple of tensors (an image and its
// label, say). A Sampler decides the order of one pass over the data. A
// Loader draws indices from the sampler, gathers them into batches (one
// stacked tensor per tuple element, dimension 0 the batch) and, if asked,
// prepares batches ahead on a background goroutine:
//
//	dir, _ := data.FindFashionMNIST()
//	images, labels, err := data.LoadFashionMNIST(dir, true)
//	if err != nil {
//		return err
//	}
//	ds := data.NewTensorDataset(images, labels) // N×1×28×28 float32, N int64
//	ld := data.NewLoader(ds, data.LoaderOptions{BatchSize: 64, Shuffle: true, Seed: 0, Prefetch: 2})
//	for epoch := range epochs {
//		ld.SetEpoch(epoch)
//		for b := range ld.Batches() {
//			x, y := b[0], b[1] // 64×1×28×28, 64
//			...
//		}
//	}
//
// Datasets that can gather a whole batch at once implement Batcher, which
// the Loader prefers over Get (TensorDataset does: it copies contiguous
// rows). Samplers that can be told the epoch implement EpochSetter, as the
// DistributedSampler that splits the data across ranks does.
//
// For language models, TextCorpus reads a directory tree's files (Go's own
// source by default: GoRootSource) as bytes, one token each, and splits
// them by a hash of each file's path into training and validation.
// RandomWindows draws training batches as a function of (seed, step),
// each rank taking its rows of one global batch, so that DDP ranks
// together see what one process sees; EvalWindows walks a split in order:
//
//	root, err := data.GoRootSource()
//	c, err := data.NewTextCorpus(root, data.TextCorpusOptions{}) // *.go, a tenth for validation
//	w, err := c.RandomWindows(data.Train, data.WindowOptions{BatchSize: 32, Block: 256, Seed: 1, World: world, Rank: rank})
//	for step := range steps {
//		x, y := w.Batch(step) // 32×256 int64 bytes; y[i][j] follows x[i][j]
//		...
//	}
//
// Bad input read from files comes back as errors wrapping ErrIDX or
// fs errors; misuse of the API (a batch size of -1, tensors whose first
// dimensions disagree, an index out of range) is a programmer error and
// panics, as in package tensor. The text corpus is the exception: its
// options usually come from flags, so a bad one is an error (wrapping
// ErrTextOption), as are a corpus with no files (ErrNoTextFiles), an
// empty split (ErrEmptySplit) and a block too long for a split
// (ErrSplitTooShort).
package data
