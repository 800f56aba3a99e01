//go:build !amd64 || purego

package crc32c

const hasFold = false

const foldMin = 64

func foldUpdate(crc uint32, p []byte) uint32 { panic("crc32c: no folding kernel") }
