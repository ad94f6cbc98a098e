package exitcode

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

func TestCode(t *testing.T) {
	for _, c := range []struct {
		err     error
		code    int
		printed string
	}{
		{nil, 0, ""},
		{Errorf(3, "no such session %s", "abcd"), 3, "maka: no such session abcd\n"},
		{fmt.Errorf("run: %w", &Error{Code: 1, Err: errors.New("")}), 1, ""},
		{&FlagError{Command: "maka run", Err: errors.New("unknown flag: --x")}, 2, "maka: unknown flag: --x\nRun 'maka run --help' for usage.\n"},
		{errors.New(`unknown command "x"`), 2, "maka: unknown command \"x\"\nRun 'maka --help' for usage.\n"},
	} {
		var out bytes.Buffer
		if got := Code(c.err, &out, "maka"); got != c.code || out.String() != c.printed {
			t.Errorf("Code(%v) = %d, printed %q; want %d, %q", c.err, got, out.String(), c.code, c.printed)
		}
	}
}
