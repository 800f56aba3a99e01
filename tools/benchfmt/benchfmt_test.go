package benchfmt

import "testing"

func TestFormats(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Ratio(1.234), "1.23×"}, {Ratio(0.0456), "0.046×"},
		{Row([]string{"a", "b"}), "| a | b |\n"},
		{Size(8), "8 B"}, {Size(64 << 10), "64 KiB"}, {Size(1 << 20), "1 MiB"}, {Size(1536), "1.5 KiB"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
