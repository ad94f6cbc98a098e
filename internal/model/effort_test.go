package model

import (
	"slices"
	"testing"

	"github.com/maka-agent/maka/internal/providerinfo"
)

// The command line checks efforts with providerinfo: its list is this
// package's.
func TestEffortsAreProviderinfos(t *testing.T) {
	mine := []string{string(EffortDefault), string(EffortOff), string(EffortLow), string(EffortMedium), string(EffortHigh)}
	if !slices.Equal(mine, providerinfo.Efforts) {
		t.Fatalf("efforts %q, providerinfo has %q", mine, providerinfo.Efforts)
	}
	if _, err := ParseEffort("extreme"); err == nil {
		t.Fatal("ParseEffort accepted extreme")
	}
}
