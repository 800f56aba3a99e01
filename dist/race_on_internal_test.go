//go:build race

package dist

// raceEnabled says the race detector is on: TestScale runs fewer ranks.
const raceEnabled = true
