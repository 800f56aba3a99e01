package zero

import "io"

// SetStderr makes Step report its failure to w until restore is called.
func SetStderr(w io.Writer) (restore func()) {
	old := stderr
	stderr = w
	return func() { stderr = old }
}
