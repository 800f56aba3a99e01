package dist

import (
	"context"
	"fmt"
	"io"
)

// Main is a worker's main function around fn: it joins the job as Init
// does with opt (from the environment godist run, torchrun or Slurm sets
// when opt leaves it out), calls fn with the group, destroys the group
// when fn returns, and returns the process's exit status. On failure,
// Init's or fn's, it records the error for the launcher's root-cause
// report (RecordError, torchrun's @record) and prints it to stderr as
// "name: rank R: error" before returning 1.
//
//	func main() {
//		os.Exit(dist.Main(context.Background(), "train", dist.Options{}, os.Stderr,
//			func(ctx context.Context, g *dist.Group) error { return train(ctx, g) }))
//	}
func Main(ctx context.Context, name string, opt Options, stderr io.Writer, fn func(context.Context, *Group) error) int {
	g, err := Init(ctx, opt)
	if err != nil {
		RecordError(err)
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	defer g.Destroy()
	if err := fn(ctx, g); err != nil {
		RecordError(err)
		fmt.Fprintf(stderr, "%s: rank %d: %v\n", name, g.Rank(), err)
		return 1
	}
	return 0
}
