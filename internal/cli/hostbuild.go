package cli

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"strconv"
)

// Build skew: a host keeps running the maka-host it was started from, so
// after an upgrade (or with a second install) a command can talk to
// another build than the one it would start. The identity compared is the
// Go build ID of the host executable: the running host's (read from its
// /proc/PID/exe, which still opens the original file after it was
// replaced) against the maka-host this command starts (next to it, else on
// PATH). maka, maka-host and maka-tui are separate executables with
// different build IDs, but all three start the same maka-host, so the
// question a notice answers is the one the user can act on: would
// stopping the host and letting the next command start one run another
// program? The Go build ID answers it exactly (it hashes the inputs and
// the build, so an uncommitted change counts, where a VCS revision would
// not). Where it cannot be read (not Linux, another user, no maka-host
// found) nothing is said.

// sameBuild reports whether process pid runs the maka-host this command
// starts; known is false when that cannot be told.
func sameBuild(pid int) (same, known bool) {
	if pid <= 0 {
		return false, false
	}
	self, err := hostExecutable()
	if err != nil {
		return false, false
	}
	mine, err := executableBuildID(self)
	if err != nil {
		return false, false
	}
	theirs, err := executableBuildID("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return false, false
	}
	return theirs == mine, true
}

// otherBuildNotice is what a command says when its host runs another
// build of maka-host.
func otherBuildNotice(pid int, rootHint string) string {
	return fmt.Sprintf("maka: the runtime host (pid %d) runs another build of maka-host than the one this command starts; "+
		"stop it with 'maka host stop%s' once its work is done, and the next command starts this build", pid, rootHint)
}

// executableBuildID returns the Go build ID of an ELF executable.
func executableBuildID(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := f.Section(".note.go.buildid")
	if s == nil {
		return "", fmt.Errorf("%s has no Go build ID", path)
	}
	data, err := s.Data()
	if err != nil {
		return "", err
	}
	return parseGoBuildIDNote(data, f.ByteOrder)
}

// parseGoBuildIDNote decodes an ELF note section holding the Go build ID:
// name size, descriptor size and type (4 bytes each), the name "Go\0\0",
// then the ID (NUL-padded).
func parseGoBuildIDNote(data []byte, order binary.ByteOrder) (string, error) {
	const header = 12
	if len(data) < header {
		return "", fmt.Errorf("Go build ID note is %d bytes", len(data))
	}
	nameSize, descSize := order.Uint32(data[0:4]), order.Uint32(data[4:8])
	nameEnd := header + (uint64(nameSize)+3)&^3
	if nameSize != 4 || nameEnd > uint64(len(data)) || string(data[header:header+4]) != "Go\x00\x00" {
		return "", fmt.Errorf("not a Go build ID note")
	}
	if uint64(descSize) > uint64(len(data))-nameEnd {
		return "", fmt.Errorf("Go build ID note is cut short")
	}
	id := bytes.TrimRight(data[nameEnd:nameEnd+uint64(descSize)], "\x00")
	if len(id) == 0 {
		return "", fmt.Errorf("empty Go build ID")
	}
	return string(id), nil
}
