//go:build race

package data

// raceEnabled is true under the race detector, which makes gunzipping the
// full dataset take tens of seconds.
const raceEnabled = true
