package cli

import (
	"reflect"
	"testing"

	"github.com/maka-agent/maka/protocol"
)

func TestMCPAddInput(t *testing.T) {
	in, err := mcpAddInput([]string{"fs", "npx", "-y", "server"}, 1, []string{"TOKEN=a=b"}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if in.Transport != protocol.MCPTransportStdio || in.Command != "npx" || !reflect.DeepEqual(in.Args, []string{"-y", "server"}) ||
		!reflect.DeepEqual(in.Env, []protocol.MCPPair{{Name: "TOKEN", Value: "a=b"}}) || in.Cwd == "" {
		t.Fatalf("stdio input %+v", in)
	}
	in, err = mcpAddInput([]string{"remote"}, -1, nil, "https://x/mcp", []string{"Authorization: Bearer t:1"})
	if err != nil {
		t.Fatal(err)
	}
	if in.Transport != protocol.MCPTransportHTTP || in.URL != "https://x/mcp" ||
		!reflect.DeepEqual(in.Headers, []protocol.MCPPair{{Name: "Authorization", Value: "Bearer t:1"}}) {
		t.Fatalf("http input %+v", in)
	}
	for _, bad := range []struct {
		args    []string
		dash    int
		env     []string
		url     string
		headers []string
	}{
		{args: []string{"a__b", "x"}, dash: 1},                         // "__" in the name
		{args: []string{"fs"}, dash: -1},                               // no command, no url
		{args: []string{"fs", "x"}, dash: -1},                          // command without --
		{args: []string{"fs", "x"}, dash: 1, url: "https://x"},         // both
		{args: []string{"fs", "x"}, dash: 1, env: []string{"NOVALUE"}}, // not K=V
		{args: []string{"fs"}, dash: -1, url: "https://x", headers: []string{"novalue"}},
		{args: []string{"fs", "x"}, dash: 1, headers: []string{"A: b"}},
	} {
		if _, err := mcpAddInput(bad.args, bad.dash, bad.env, bad.url, bad.headers); err == nil {
			t.Errorf("accepted %+v", bad)
		}
	}
}
