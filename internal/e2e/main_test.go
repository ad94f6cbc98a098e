package e2e_test

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/maka-agent/maka/internal/transport"
	"github.com/maka-agent/maka/protocol"
)

// dialEnv, when set, makes the test binary a client that dials the socket
// it names, says hello and prints what the host did: "accepted" or
// "refused: …". Tool calls run it to reach the host from inside a call.
const dialEnv = "MAKA_E2E_DIAL"

func TestMain(m *testing.M) {
	if endpoint := os.Getenv(dialEnv); endpoint != "" {
		fmt.Println(dialHost(endpoint))
		os.Exit(0)
	}
	if spec := os.Getenv(exchangeEnv); spec != "" {
		os.Exit(exchangeMain(spec))
	}
	if starts := os.Getenv(mcpServerEnv); starts != "" {
		os.Exit(mcpServerMain(starts))
	}
	if code, ok := forkDialRole(); ok {
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}

func dialHost(endpoint string) string {
	nc, err := net.Dial("unix", endpoint)
	if err != nil {
		return "refused: " + err.Error()
	}
	tc := transport.New(nc)
	defer tc.Close()
	if err := tc.WriteValue(protocol.Hello{Kind: protocol.KindHello, ClientInstanceID: "from-a-tool", Surface: protocol.SurfaceTUI}); err != nil {
		return "refused: " + err.Error()
	}
	v, err := tc.ReadFrame(10 * time.Second)
	if err != nil {
		return "refused: " + err.Error()
	}
	if f, err := protocol.DecodeHostFrame(v); err == nil {
		if _, ok := f.(*protocol.Accepted); ok {
			return "accepted"
		}
	}
	return "refused: unexpected answer"
}
