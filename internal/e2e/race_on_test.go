//go:build race

package e2e_test

// raceEnabled reports a build with the race detector, whose slower start
// of every child process the stress tests make room for.
const raceEnabled = true
