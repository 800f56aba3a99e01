package peers

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	dir, err := Write(filepath.Join(t.TempDir(), "sub"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range Scripts {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(b), "#!/usr/bin/python3\n") {
			t.Errorf("%s starts %q", name, b[:min(len(b), 40)])
		}
	}
}
