package hostproc

import (
	"slices"
	"testing"

	"github.com/maka-agent/maka/client"
)

// A host started by hand runs until it is stopped; one a client spawns
// exits once idle.
func TestForegroundHostDoesNotIdleOut(t *testing.T) {
	if d := newHostServeCommand().Flags().Lookup("idle-grace").DefValue; d != "0s" {
		t.Fatalf("maka host serve --idle-grace defaults to %s, want 0s (never)", d)
	}
	args := client.HostServeArgs("/r", "id")
	i := slices.Index(args, "--idle-grace")
	if i < 0 || i+1 >= len(args) || args[i+1] != client.SpawnedIdleGrace.String() {
		t.Fatalf("spawned host args %v do not pass --idle-grace %v", args, client.SpawnedIdleGrace)
	}
}
