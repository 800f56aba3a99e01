package dist_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/store"
)

// TestMainStatus checks dist.Main's three endings: fn's success (status 0, the
// group usable inside fn), fn's error (status 1, printed with the rank and
// recorded in the launcher's error file) and Init's error (status 1,
// printed without a rank, since there is none).
func TestMainStatus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	one := dist.Options{Rank: 0, WorldSize: 1, Store: store.NewMem()}

	var out strings.Builder
	ran := false
	if st := dist.Main(ctx, "job", one, &out, func(ctx context.Context, g *dist.Group) error {
		ran = g.Size() == 1
		return g.Barrier(ctx)
	}); st != 0 || !ran || out.Len() != 0 {
		t.Fatalf("success: status %d, ran %v, stderr %q", st, ran, out.String())
	}

	errFile := filepath.Join(t.TempDir(), "error.json")
	t.Setenv(dist.ErrorFileEnv, errFile)
	out.Reset()
	one.Store = store.NewMem()
	if st := dist.Main(ctx, "job", one, &out, func(context.Context, *dist.Group) error {
		return errors.New("loss is NaN")
	}); st != 1 || out.String() != "job: rank 0: loss is NaN\n" {
		t.Fatalf("fn's error: status %d, stderr %q", st, out.String())
	}
	if b, err := os.ReadFile(errFile); err != nil || !strings.Contains(string(b), "loss is NaN") {
		t.Fatalf("fn's error not recorded in the error file: %q, %v", b, err)
	}

	out.Reset()
	bad := dist.Options{Rank: 3, WorldSize: 2, Store: store.NewMem()}
	if st := dist.Main(ctx, "job", bad, &out, func(context.Context, *dist.Group) error {
		t.Error("fn ran after Init failed")
		return nil
	}); st != 1 || !strings.HasPrefix(out.String(), "job: ") || strings.Contains(out.String(), "rank 0") {
		t.Fatalf("Init's error: status %d, stderr %q", st, out.String())
	}
}
