// Package benchfmt formats the benchmark comparison tools' markdown tables
// (distcmp, hostcmp, rpccmp) alike.
package benchfmt

import (
	"fmt"
	"strings"
)

// Ratio formats a ratio with two decimals, or two significant digits
// below 0.1.
func Ratio(r float64) string {
	if r < 0.1 {
		return fmt.Sprintf("%.2g×", r)
	}
	return fmt.Sprintf("%.2f×", r)
}

// Row is a markdown table row of fields.
func Row(fields []string) string {
	return "| " + strings.Join(fields, " | ") + " |\n"
}

// Size is the anchors' (and godist bench's) size format: "8 B", "64 KiB",
// "1 MiB".
func Size(b int) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.6g MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.6g KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}
