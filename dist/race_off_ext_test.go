//go:build !race

package dist_test

const raceOn = false
