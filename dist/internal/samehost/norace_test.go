//go:build !race

package samehost

const raceEnabled = false
