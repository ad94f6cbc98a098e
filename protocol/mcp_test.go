package protocol

import (
	"strings"
	"testing"
)

func mcpValidCases() []shCase {
	return []shCase{
		{name: "set stdio", op: OpMCPServersSet, in: `{"name":"echo","transport":"stdio","command":"/bin/echo","args":["a",""],"cwd":"/w","env":[{"name":"TOKEN","value":"s3cret"}]}`},
		{name: "set http", op: OpMCPServersSet, in: `{"name":"gh-1","transport":"http","url":"https://mcp.example/x","headers":[{"name":"Authorization","value":"Bearer t"}]}`},
		{name: "remove", op: OpMCPServersRemove, in: `{"name":"echo"}`},
		{name: "query", op: OpMCPServersQuery, in: `{}`},
		{name: "query empty", op: OpMCPServersQuery, out: true, in: `{"servers":[]}`},
		{name: "query full", op: OpMCPServersQuery, out: true, in: `{"servers":[{"name":"echo","transport":"stdio","command":"/bin/echo","args":["x"],"cwd":"/w","envNames":["TOKEN"],"headerNames":[],"state":"failed","reason":"exited","starts":2,"tools":[{"name":"echo","description":"d","readOnlyHint":true}],"toolsOmitted":1}]}`},
		{name: "set result", op: OpMCPServersSet, out: true, in: `{"name":"gh","transport":"http","url":"http://x","args":[],"envNames":[],"headerNames":["X-Key"],"state":"not_started","starts":0,"tools":[]}`},
		{name: "remove result", op: OpMCPServersRemove, out: true, in: `{"name":"gh","removed":true}`},
	}
}

func TestMCPOperationsDecodeWhatTheHostAccepts(t *testing.T) {
	for _, c := range mcpValidCases() {
		v, err := Parse([]byte(c.in))
		if err != nil {
			t.Fatal(err)
		}
		codec, _ := shapeCodec(t, c, v)
		d := &D{}
		codec(d, v)
		if d.Failed() {
			t.Errorf("%s: %v", c.name, d.Err())
		}
		shFuzzCodec(t, c.name, codec, v)
	}
	for _, in := range []string{
		`{"name":"a__b","transport":"stdio","command":"x"}`,               // "__" splits tool names
		`{"name":"-a","transport":"stdio","command":"x"}`,                 // name must start with a letter or digit
		`{"name":"a","transport":"stdio"}`,                                // no command
		`{"name":"a","transport":"stdio","command":"x","url":"http://x"}`, // stdio with a url
		`{"name":"a","transport":"http","url":"file:///etc/passwd"}`,      // not http
		`{"name":"a","transport":"http","url":"http://x","command":"x"}`,  // http with a command
		`{"name":"a","transport":"stdio","command":"x","args":[]}`,        // empty args is absent
		`{"name":"a","transport":"stdio","command":"x","cwd":"rel"}`,      // relative cwd
		`{"name":"a","transport":"stdio","command":"x","env":[{"name":"A B","value":""}]}`,
		`{"name":"a","transport":"stdio","command":"x","env":[{"name":"A","value":""},{"name":"a","value":""}]}`,
		`{"name":"a","transport":"http","url":"http://x","headers":[{"name":"X","value":"a\r\nInjected: 1"}]}`,
		`{"name":"a","transport":"stdio","command":"x\u0000y"}`,
		`{"name":"` + strings.Repeat("a", 33) + `","transport":"stdio","command":"x"}`,
	} {
		v, err := Parse([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		spec, _ := Lookup(string(OpMCPServersSet))
		d := &D{}
		spec.input(d, v)
		if !d.Failed() {
			t.Errorf("accepted %s", in)
		}
	}
}

// FuzzMCPOperations feeds arbitrary JSON through the input and result
// codecs of the MCP extension operations.
func FuzzMCPOperations(f *testing.F) {
	for _, c := range mcpValidCases() {
		f.Add([]byte(c.in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		shFuzzOps(t, data, OpMCPServersQuery, OpMCPServersSet, OpMCPServersRemove)
	})
}
