package fsdp_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/checkpoint"
	"github.com/godist/godist/checkpoint/paritytest"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/fsdp"
	"github.com/godist/godist/tensor"
)

// fsdpState is what FullShard at world 2 writes after 3 steps (the full
// state dict, and the input the reference ran), and fsdpTorch what
// PyTorch 1.13 computes from it (testdata/parity/make_fsdp_torch.py).
var (
	fsdpState = filepath.Join("..", "..", "testdata", "parity", "fsdp_full_state.safetensors")
	fsdpTorch = &paritytest.Ref{Path: filepath.Join("..", "..", "testdata", "parity", "fsdp_full_state_torch.safetensors")}
)

// TestFullStateDictInPyTorch: FSDP's full state dict loads into PyTorch's
// model of the same architecture (strictly: every name and shape is
// PyTorch's), and gives PyTorch's logits. The file PyTorch loaded is
// committed; the test checks FSDP still writes exactly it, then that the
// plain module computes PyTorch's logits from it. GODIST_WRITE_PARITY=1
// rewrites the file (then run make_fsdp_torch.py).
func TestFullStateDictInPyTorch(t *testing.T) {
	_, sd := run(t, 2, withFSDP(fsdp.Options{Wrap: isBlock}, 3))
	x, _ := tokens(0, 99)
	if os.Getenv("GODIST_WRITE_PARITY") == "1" {
		out := map[string]*tensor.Tensor{"input.x": x}
		for k, v := range sd {
			out["model."+k] = v
		}
		if err := checkpoint.SaveFile(fsdpState, out, map[string]string{"config": "vocab 256 block 8 layers 2 heads 2 dim 12"}); err != nil {
			t.Fatal(err)
		}
		t.Skip("wrote " + fsdpState + "; now run testdata/parity/make_fsdp_torch.py")
	}
	saved, _, err := checkpoint.LoadFile(fsdpState)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*tensor.Tensor{}
	for k, v := range saved {
		if k != "input.x" {
			want[k[len("model."):]] = v
		}
	}
	if len(want) != len(sd) {
		t.Fatalf("FSDP's full state dict has %d tensors, the file PyTorch loaded %d", len(sd), len(want))
	}
	for k, v := range sd {
		if w := want[k]; w == nil || !tensor.Equal(v, w) {
			t.Fatalf("%s: FSDP no longer writes the state PyTorch loaded", k)
		}
	}
	if !tensor.Equal(saved["input.x"], x) {
		t.Fatal("the reference's input differs from the test's")
	}
	plain := gpt(7) // other weights, all replaced
	if err := nn.LoadStateDict(plain, sd, true); err != nil {
		t.Fatal(err)
	}
	logits := plain.Forward(autograd.Const(x)).Value()
	fsdpTorch.Expect(t, "logits of the plain module from FSDP's state", logits, "logits", 1e-5)
}
