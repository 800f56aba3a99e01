package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// godist run leaves no temporary directory behind, except what holds
// something for the user, and then it says where (issue 27, item 10).
func TestRunRemovesTempDirs(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("GODIST_TOKEN", "")
	run := func(t *testing.T, args ...string) (int, string) {
		t.Helper()
		var errb bytes.Buffer
		o, code := parseRun(args, func(string) string { return "" }, &errb)
		if code >= 0 {
			t.Fatalf("parseRun(%q): exit %d: %s", args, code, errb.String())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var out bytes.Buffer
		code = runJob(ctx, o, make(chan os.Signal), &out, &errb)
		return code, out.String() + errb.String()
	}
	left := func() []string {
		ents, _ := os.ReadDir(tmp)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}
	clear := func() {
		for _, n := range left() {
			os.RemoveAll(filepath.Join(tmp, n))
		}
	}
	sh := func(script string) []string {
		return []string{"--standalone", "--nproc-per-node", "2", "/bin/sh", "-c", script}
	}

	for _, c := range []struct {
		name string
		args []string
		code int
	}{
		{"success", sh("echo out"), 0},
		{"failure", sh("echo err >&2; exit 3"), 3},
		{"tee", append([]string{"--tee", "3"}, sh("echo out; echo err >&2")...), 0},
		{"tee, failure", append([]string{"--tee", "3"}, sh("exit 3")...), 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			clear()
			code, out := run(t, c.args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d:\n%s", code, c.code, out)
			}
			if l := left(); len(l) > 0 {
				t.Fatalf("left %v in $TMPDIR:\n%s", l, out)
			}
		})
	}

	// Output that went only to files stays, and godist run says where.
	t.Run("redirects", func(t *testing.T) {
		clear()
		code, out := run(t, append([]string{"--redirects", "1"}, sh("echo out $LOCAL_RANK")...)...)
		l := left()
		if code != 0 || len(l) != 1 || !strings.Contains(out, "kept in "+filepath.Join(tmp, l[0])) {
			t.Fatalf("exit %d, left %v:\n%s", code, l, out)
		}
		logs, _ := filepath.Glob(filepath.Join(tmp, l[0], "*", "attempt_0", "1", "stdout.log"))
		if b, err := os.ReadFile(strings.Join(logs, "")); err != nil || string(b) != "out 1\n" {
			t.Fatalf("rank 1's stdout.log: %q, %v", b, err)
		}
	})

	// A flight record, which the worker's stderr points to, stays too.
	for _, tee := range []bool{false, true} {
		t.Run("flight record, tee "+map[bool]string{false: "off", true: "on"}[tee], func(t *testing.T) {
			clear()
			args := sh(`f="$(dirname "$GODIST_ERROR_FILE")/godist-flight-rank$RANK-$$.json"; echo '{}' > "$f"; echo "flight record written to $f" >&2; exit 3`)
			if tee {
				args = append([]string{"--tee", "2"}, args...)
			}
			code, out := run(t, args...)
			l := left()
			if code != 3 || len(l) != 1 || !strings.Contains(out, "kept "+filepath.Join(tmp, l[0])) || !strings.Contains(out, "godist-flight-rank") {
				t.Fatalf("exit %d, left %v:\n%s", code, l, out)
			}
			recs, _ := filepath.Glob(filepath.Join(tmp, l[0], "attempt_0", "*", "godist-flight-rank*.json"))
			if tee { // under the log directory's run id
				recs, _ = filepath.Glob(filepath.Join(tmp, l[0], "*", "attempt_0", "*", "godist-flight-rank*.json"))
			}
			if len(recs) == 0 {
				t.Fatalf("no flight record kept under %s:\n%s", l[0], out)
			}
		})
	}
	clear()
}
