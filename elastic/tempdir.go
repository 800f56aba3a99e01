package elastic

import (
	"io/fs"
	"os"
	"path/filepath"
)

// disposable are the files a run's temporary directory holds that nobody
// needs once the job has ended: the workers' error files, whose contents
// are in the report, and their log files, when every line of them went to
// the console too (--tee).
var disposable = map[string]bool{"error.json": true, "stdout.log": true, "stderr.log": true}

// RemoveTempDir removes dir, a temporary directory of a run, unless a
// worker left something else there, such as a flight record
// (godist-flight-rank*.json) whose path its stderr gave: then dir stays
// as it is, and RemoveTempDir returns those files' paths, relative to dir,
// for the caller to say where they are. An empty dir is a no-op.
func RemoveTempDir(dir string) (kept []string) {
	if dir == "" {
		return nil
	}
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || disposable[d.Name()] {
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		kept = append(kept, rel)
		return nil
	})
	if len(kept) == 0 {
		os.RemoveAll(dir)
	}
	return kept
}
