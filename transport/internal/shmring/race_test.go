//go:build race

package shmring

const raceEnabled = true
