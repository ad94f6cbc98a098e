package sandbox

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// fakeHostEnv makes the test binary a host that starts one call and
// blocks in Wait until it is killed (TestHostDeathEndsTheCall). The value
// is the call's command.
const fakeHostEnv = "MAKA_SANDBOX_TEST_FAKE_HOST"

func TestMain(m *testing.M) {
	if command := os.Getenv(fakeHostEnv); command != "" {
		os.Exit(fakeHost(command))
	}
	if code, ok := peerRole(); ok {
		os.Exit(code)
	}
	if code, ok := ttyRole(); ok {
		os.Exit(code)
	}
	if code, ok := rawSocketRole(); ok {
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}

func fakeHost(command string) int {
	c, err := Start(context.Background(), Spec{Command: command, Dir: os.TempDir(), Stdout: os.Stdout, Stderr: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c.Wait()
	return 0
}
