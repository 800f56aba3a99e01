//go:build !race

package shmring

const raceEnabled = false
