package dist_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/tensor"
)

// TestSendPauseAllReduce is the program of the issue that found the
// middle floor's defect: rank 0 sends two tensors, pauses past the desync
// probe's delay, then all-reduces; rank 1 receives both, then
// all-reduces. The program is correct; it must not fail with a desync.
func TestSendPauseAllReduce(t *testing.T) {
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		ctx := context.Background()
		if g.Rank() == 0 {
			for i := range 2 {
				if err := g.Send(ctx, iota32(float32(10*i), 4), 1, 0); err != nil {
					return err
				}
			}
			time.Sleep(time.Second)
		} else {
			for i := range 2 {
				got := tensor.New(tensor.Float32, 4)
				if _, err := g.Recv(ctx, got, 0, 0); err != nil {
					return err
				}
				if err := sameBytes(fmt.Sprint("message ", i), got.Bytes(), iota32(float32(10*i), 4).Bytes()); err != nil {
					return err
				}
			}
		}
		x := iota32(1, 4)
		if err := g.AllReduce(ctx, x, dist.Sum); err != nil {
			return err
		}
		return sameBytes("all_reduce", x.Bytes(), tensor.FromFloat32([]float32{2, 4, 6, 8}).Bytes())
	})
}
