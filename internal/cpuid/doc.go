// Package cpuid reads the x86 CPU's identification (CPUID) and the
// extended control register XCR0 (XGETBV), for the packages that choose
// kernels by what the CPU and the OS support: golang.org/x/sys/cpu
// reports most features, but not all (VPCLMULQDQ without AVX-512), and
// not the raw words. amd64 only; elsewhere the package is empty.
package cpuid
