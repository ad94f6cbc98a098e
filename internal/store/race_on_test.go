//go:build race

package store

// raceEnabled reports whether the tests run under the race detector, which
// makes the pure-Go SQLite many times slower; tests shrink their loops then.
const raceEnabled = true
