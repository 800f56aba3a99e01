package shmfile

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestOwner(t *testing.T) {
	for _, c := range []struct {
		name      string
		pid, pgid int
		ok        bool
	}{
		{"godist-4242-4200-0123456789abcdef-region-1-1", 4242, 4200, true},
		{"godist-4242-4242-0123456789abcdef-k00ff-0-1", 4242, 4242, true},
		{"godist-4242-0123456789abcdef-region-1-1", 0, 0, false}, // the older form: no group
		{"godist-4242-4200", 0, 0, false},
		{"godist--4200-x-y", 0, 0, false},
		{"godist-+42-4200-x-y", 0, 0, false},
		{"godist-042-4200-x-y", 0, 0, false},
		{"godist-0-4200-x-y", 0, 0, false},
		{"godist-99999999999999999999-1-x-y", 0, 0, false},
		{"other-4242-4200-x-y", 0, 0, false},
		{"godist-shmring-test-123", 0, 0, false},
	} {
		pid, pgid, ok := Owner(c.name)
		if pid != c.pid || pgid != c.pgid || ok != c.ok {
			t.Errorf("Owner(%q) = %d, %d, %v; want %d, %d, %v", c.name, pid, pgid, ok, c.pid, c.pgid, c.ok)
		}
	}
	f, err := Create("test", 8)
	if err != nil {
		t.Skipf("cannot create a file in %s: %v", Dir, err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	pid, _, ok := Owner(filepath.Base(f.Name()))
	if !ok || pid != os.Getpid() || !strings.HasPrefix(filepath.Base(f.Name()), Prefix()) || !strings.HasSuffix(f.Name(), "-test") {
		t.Errorf("Create made %s: owner %d, %v", f.Name(), pid, ok)
	}
	if st, err := f.Stat(); err != nil || st.Size() != 8 || st.Mode().Perm() != 0o600 {
		t.Errorf("Create made %v, %v; want 8 bytes, mode 0600", st, err)
	}
}

// TestRemove: Remove takes a process's files, and with group those of
// every process of its group, and nothing else.
func TestRemove(t *testing.T) {
	if _, err := os.Stat(Dir); err != nil {
		t.Skip(err)
	}
	// Numbers above Linux's largest pid (2^22): no process has them.
	base := 1<<30 + rand.IntN(1<<29)
	leader, child, stranger := base, base+1, base+2
	names := map[string]string{
		"leader":          fmt.Sprintf("godist-%d-%d-00-region-0-1", leader, leader),
		"child":           fmt.Sprintf("godist-%d-%d-01-region-1-1", child, leader),
		"stranger":        fmt.Sprintf("godist-%d-%d-02-region-2-1", stranger, stranger),
		"stranger's kid":  fmt.Sprintf("godist-%d-%d-03-region-2-2", stranger+1, stranger),
		"not one of ours": fmt.Sprintf("godist-%d-x", leader),
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(Dir, n), nil, 0o600); err != nil {
			t.Skip(err)
		}
		defer os.Remove(filepath.Join(Dir, n))
	}
	if gone := Remove(leader, false); !slices.Equal(gone, []string{names["leader"]}) {
		t.Errorf("Remove(leader, false) = %v, want the leader's file alone", gone)
	}
	if gone := Remove(leader, true); !slices.Equal(gone, []string{names["child"]}) {
		t.Errorf("Remove(leader, true) = %v, want the child's file", gone)
	}
	for _, k := range []string{"stranger", "stranger's kid", "not one of ours"} {
		if _, err := os.Stat(filepath.Join(Dir, names[k])); err != nil {
			t.Errorf("the %s file is gone: %v", k, err)
		}
	}
}
