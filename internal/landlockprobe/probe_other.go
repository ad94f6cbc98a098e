//go:build !linux

package landlockprobe

// Summary is the sandbox line of host status.
func Summary() string { return "unavailable: Landlock needs Linux" }
