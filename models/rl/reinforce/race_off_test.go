//go:build !race

package reinforce

const raceEnabled = false
