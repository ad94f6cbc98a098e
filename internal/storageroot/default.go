package storageroot

import (
	"fmt"
	"os"
	"path/filepath"
)

// DefaultPath is the storage root of a command without --root:
// $MAKA_ROOT, else ${XDG_CONFIG_HOME:-~/.config}/Maka/workspaces/default.
// The command line and the host's executable share it.
func DefaultPath() (string, error) {
	if r := os.Getenv("MAKA_ROOT"); r != "" {
		return r, nil
	}
	base := os.Getenv("XDG_CONFIG_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("cannot find the home directory (set MAKA_ROOT or --root): %w", err)
		}
		base = filepath.Join(home, ".config")
	}
	return filepath.Join(base, "Maka", "workspaces", "default"), nil
}
