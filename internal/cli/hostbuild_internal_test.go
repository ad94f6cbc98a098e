package cli

import (
	"encoding/binary"
	"os"
	"strings"
	"testing"
)

// note builds a build ID note with the given name and descriptor.
func note(name, desc string, descSize uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(name)))
	b = binary.LittleEndian.AppendUint32(b, descSize)
	b = binary.LittleEndian.AppendUint32(b, 4)
	b = append(b, name...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return append(b, desc...)
}

func TestParseGoBuildIDNote(t *testing.T) {
	id := "ILplQ62L_PQDnPR_jY8Z/8WHf7wByDQtqfOZ-YxNV/kSiuAgl4HsoJoSO6lTSb/uE5-lozCQAoYqnIs74_Z"
	ok := []struct {
		name string
		data []byte
	}{
		{"as the linker writes it", note("Go\x00\x00", id+"\x00", uint32(len(id)+1))},
		{"without padding", note("Go\x00\x00", id, uint32(len(id)))},
		{"trailing bytes after the descriptor", append(note("Go\x00\x00", id, uint32(len(id))), 0, 0, 0)},
	}
	for _, tc := range ok {
		got, err := parseGoBuildIDNote(tc.data, binary.LittleEndian)
		if err != nil || got != id {
			t.Errorf("%s: %q, %v", tc.name, got, err)
		}
	}
	bad := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"header only", note("", "", 0)[:12]},
		{"another note", note("GNU\x00", id, uint32(len(id)))},
		{"descriptor cut short", note("Go\x00\x00", id[:10], uint32(len(id)))},
		{"empty id", note("Go\x00\x00", "\x00\x00\x00\x00", 4)},
		{"huge sizes", note("Go\x00\x00", id, 1<<31)},
	}
	for _, tc := range bad {
		if got, err := parseGoBuildIDNote(tc.data, binary.LittleEndian); err == nil {
			t.Errorf("%s: accepted as %q", tc.name, got)
		}
	}
}

// This test binary is its own build (standing in for the maka-host this
// command starts).
func TestSameBuildOfItself(t *testing.T) {
	if _, err := os.Stat("/proc/self/exe"); err != nil {
		t.Skip("no /proc on this system")
	}
	saved := hostExecutable
	hostExecutable = os.Executable
	t.Cleanup(func() { hostExecutable = saved })
	if same, known := sameBuild(os.Getpid()); !same || !known {
		t.Fatalf("sameBuild(own pid) = %v, %v", same, known)
	}
	if _, known := sameBuild(0); known {
		t.Fatal("sameBuild(0) claims to know")
	}
}

// FuzzParseGoBuildIDNote checks that the note decoder never panics and
// that what it accepts is a non-empty id without NUL padding.
func FuzzParseGoBuildIDNote(f *testing.F) {
	f.Add(note("Go\x00\x00", "abc/def\x00", 8))
	f.Add(note("Go\x00\x00", "abc", 3))
	f.Add(note("GNU\x00", "abc", 3))
	f.Add([]byte{4, 0, 0, 0, 255, 255, 255, 255, 4, 0, 0, 0, 'G', 'o', 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		id, err := parseGoBuildIDNote(data, binary.LittleEndian)
		if err == nil && (id == "" || strings.HasSuffix(id, "\x00")) {
			t.Fatalf("accepted %q", id)
		}
	})
}
