package progress

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
)

// JSONLine returns a function that passes on a run's error, or else
// writes its result to w as one JSON line: what the examples' rank 0
// prints last for the tests and benchmarks that run them. A nil result
// (the other ranks') prints nothing.
//
//	return progress.JSONLine[*result](stdout)(run(ctx, g, c))
func JSONLine[T any](w io.Writer) func(T, error) error {
	return func(v T, err error) error {
		if err != nil {
			return err
		}
		if rv := reflect.ValueOf(v); !rv.IsValid() || rv.Kind() == reflect.Pointer && rv.IsNil() {
			return nil
		}
		line, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(line))
		return err
	}
}
