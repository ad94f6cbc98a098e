package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/protocol"
)

func TestHostStatusPrintsTheSandbox(t *testing.T) {
	want := sandboxSummary()
	t.Logf("sandbox: %s", want)
	if !strings.HasPrefix(want, "landlock ABI ") && !strings.HasPrefix(want, "unavailable: ") {
		t.Fatalf("sandbox summary %q", want)
	}
	for _, running := range []bool{false, true} {
		v := hostView{Root: "/r", Reason: "no runtime host is running", Sandbox: want}
		if running {
			v = runningView(v)
		}
		var b bytes.Buffer
		printView(&b, v)
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		if last := lines[len(lines)-1]; !strings.HasPrefix(last, "sandbox") || !strings.HasSuffix(last, want) {
			t.Errorf("running %v: last line %q, want the sandbox line (%s)", running, last, b.String())
		}
	}
}

// runningView is v as a running host's.
func runningView(v hostView) hostView {
	v.Running = true
	v.Reason = ""
	v.Registration = &client.Registration{}
	v.Status = &protocol.HostStatus{State: protocol.StateReady}
	return v
}
