//go:build !race

package ddp_test

const raceOn = false
