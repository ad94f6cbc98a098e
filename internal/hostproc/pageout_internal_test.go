package hostproc

import "testing"

func TestMapsPath(t *testing.T) {
	for line, want := range map[string]string{
		"00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/maka":                  "/usr/bin/maka",
		"00400000-00452000 r--p 00000000 08:02 173521      /tmp/with space/maka":           "/tmp/with space/maka",
		"00400000-00452000 r--p 00000000 08:02 173521      /tmp/gone/maka (deleted)":       "/tmp/gone/maka (deleted)",
		"7ffd3b1a0000-7ffd3b1c1000 rw-p 00000000 00:00 0":                                  "",
		"7ffd3b1a0000-7ffd3b1c1000 rw-p 00000000 00:00 0                          [stack]": "[stack]",
	} {
		if got := mapsPath(line); got != want {
			t.Errorf("mapsPath(%q) = %q, want %q", line, got, want)
		}
	}
}
