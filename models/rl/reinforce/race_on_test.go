//go:build race

package reinforce

// raceEnabled: under the race detector (about 5 times slower here) the
// learning tests stop at the lower bar.
const raceEnabled = true
