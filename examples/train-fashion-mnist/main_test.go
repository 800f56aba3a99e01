package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/godist/godist/data"
)

// TestTrainsOnShippedSubset runs the whole program on the real subset in
// testdata and checks that it learns and ends with its JSON line.
func TestTrainsOnShippedSubset(t *testing.T) {
	dir, err := data.SubsetDir()
	if err != nil {
		t.Fatal(err)
	}
	for model, minAcc := range map[string]float64{"mlp": 0.7, "lenet": 0.5} {
		t.Run(model, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			f, err := os.Create(out)
			if err != nil {
				t.Fatal(err)
			}
			old := os.Stdout
			os.Stdout = f
			err = run(model, 2, 64, 0.01, 0.9, 1, dir)
			os.Stdout = old
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(out)
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			var r result
			if err := json.NewDecoder(bytes.NewReader([]byte(lines[len(lines)-1]))).Decode(&r); err != nil {
				t.Fatalf("last line %q is not JSON: %v", lines[len(lines)-1], err)
			}
			// 2 epochs over 3,000 examples: far above chance (0.1).
			if r.Model != model || r.Epochs != 2 || r.TestAcc < minAcc || r.SamplesPerS <= 0 || r.MsPerStep <= 0 {
				t.Fatalf("result %+v", r)
			}
			t.Logf("%+v", r)
		})
	}
}
