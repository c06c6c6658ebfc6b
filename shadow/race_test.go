//go:build race

package shadow

// raceEnabled: the race detector's shadow memory multiplies a process's
// RSS (5 to 10 times, by its documentation).
const raceEnabled = true
