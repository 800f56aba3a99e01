//go:build race

package dist_test

// raceOn says the race detector is on: the slow randomized tests run fewer
// seeds.
const raceOn = true
