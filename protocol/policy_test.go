package protocol

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// cfgCase is one example for a runtime-policy, catalog or vault codec: out
// selects the result side, in is the JSON given and want the canonical
// encoding of the decoded value ("" when it equals in).
type cfgCase struct {
	name string
	op   Operation
	out  bool
	in   string
	want string
}

func cfgDecode(t testing.TB, op Operation, out bool, text string) (any, error) {
	t.Helper()
	v, err := Parse([]byte(text))
	if err != nil {
		t.Fatalf("%s: test JSON does not parse: %v\n%.300s", op, err, text)
	}
	spec, ok := Lookup(string(op))
	if !ok {
		t.Fatalf("unknown operation %s", op)
	}
	if out {
		return spec.DecodeOutput(v)
	}
	return spec.DecodeInput(v)
}

// cfgCheckValid decodes every case, checks the canonical encoding, and that
// the canonical bytes decode to an equal value.
func cfgCheckValid(t *testing.T, cases []cfgCase) {
	t.Helper()
	for _, c := range cases {
		got, err := cfgDecode(t, c.op, c.out, c.in)
		if err != nil {
			t.Errorf("%s: unexpected error: %v", c.name, err)
			continue
		}
		b, err := Marshal(got)
		if err != nil {
			t.Errorf("%s: Marshal: %v", c.name, err)
			continue
		}
		want := c.want
		if want == "" {
			want = c.in
		}
		if string(b) != want {
			t.Errorf("%s: encoding\n got %.400s\nwant %.400s", c.name, b, want)
			continue
		}
		again, err := cfgDecode(t, c.op, c.out, want)
		if err != nil {
			t.Errorf("%s: canonical form does not decode: %v", c.name, err)
			continue
		}
		if !reflect.DeepEqual(got, again) {
			t.Errorf("%s: canonical form decodes to a different value\n%#v\n%#v", c.name, got, again)
		}
	}
}

// cfgCheckInvalid asserts that every case fails with invalid_frame.
func cfgCheckInvalid(t *testing.T, cases []cfgCase) {
	t.Helper()
	for _, c := range cases {
		_, err := cfgDecode(t, c.op, c.out, c.in)
		cfgWantInvalidFrame(t, c.name, err)
	}
}

func cfgWantInvalidFrame(t testing.TB, name string, err error) {
	t.Helper()
	var pe *ProtocolError
	switch {
	case err == nil:
		t.Errorf("%s: decoded, want invalid_frame", name)
	case !errors.As(err, &pe) || pe.Code != CodeInvalidFrame:
		t.Errorf("%s: error %v, want a *ProtocolError invalid_frame", name, err)
	case strings.Contains(pe.Message, "decoder panic"):
		t.Errorf("%s: decoder panicked: %v", name, err)
	}
}

// cfgEdit returns base with edits applied, keeping key order. An edit
// "a/b/0/c=JSON" sets the member or element at that path (adding a missing
// member at the end); "-a/b" deletes a member.
func cfgEdit(t testing.TB, base string, edits ...string) string {
	t.Helper()
	root, err := Parse([]byte(base))
	if err != nil {
		t.Fatalf("cfgEdit: base does not parse: %v", err)
	}
	for _, e := range edits {
		del := strings.HasPrefix(e, "-")
		path, raw := strings.TrimPrefix(e, "-"), ""
		if !del {
			var ok bool
			if path, raw, ok = strings.Cut(path, "="); !ok {
				t.Fatalf("cfgEdit: bad edit %q", e)
			}
		}
		var val Value
		if !del {
			if val, err = Parse([]byte(raw)); err != nil {
				t.Fatalf("cfgEdit: bad value in %q: %v", e, err)
			}
		}
		root = cfgEditAt(t, root, strings.Split(path, "/"), del, val)
	}
	b, err := Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func cfgEditAt(t testing.TB, v Value, segs []string, del bool, val Value) Value {
	t.Helper()
	s := segs[0]
	switch v.kind {
	case KindObject:
		obj := append([]Member(nil), v.obj...)
		for i := range obj {
			if obj[i].Key != s {
				continue
			}
			if len(segs) > 1 {
				obj[i].Value = cfgEditAt(t, obj[i].Value, segs[1:], del, val)
			} else if del {
				obj = append(obj[:i], obj[i+1:]...)
			} else {
				obj[i].Value = val
			}
			return Value{kind: KindObject, obj: obj}
		}
		if len(segs) > 1 || del {
			t.Fatalf("cfgEdit: no member %q", s)
		}
		return Value{kind: KindObject, obj: append(obj, Member{Key: s, Value: val})}
	case KindArray:
		i, err := strconv.Atoi(s)
		if err != nil || i < 0 || i >= len(v.arr) {
			t.Fatalf("cfgEdit: no element %q", s)
		}
		arr := append([]Value(nil), v.arr...)
		if len(segs) > 1 {
			arr[i] = cfgEditAt(t, arr[i], segs[1:], del, val)
		} else {
			arr[i] = val
		}
		return Value{kind: KindArray, arr: arr}
	}
	t.Fatalf("cfgEdit: cannot walk into %s at %q", v.kind, s)
	return v
}

// cfgStr encodes s as a JSON string.
func cfgStr(s string) string { return string(appendString(nil, s)) }

// cfgStrings encodes a JSON array of strings.
func cfgStrings(items ...string) string {
	b, _ := Marshal(items)
	return string(b)
}

const (
	cfgDefaultPolicy = `{"networkProxy":{"enabled":false,"protocol":"http","host":"127.0.0.1","port":7890,` +
		`"authEnabled":false,"username":"","bypassList":["metaso.cn","baidu.com"],` +
		`"autoBypassDomains":["localhost","127.0.0.1","::1","192.168.*","10.*","*.local"]},` +
		`"personalization":{"displayName":"","assistantTone":""},"memory":{"enabled":true,"agentReadEnabled":false},` +
		`"workspaceInstructions":{"enabled":true},"privacy":{"incognitoActive":false},` +
		`"chatDefaults":{"permissionMode":"ask"},"webSearch":{"enabled":false,"defaultProvider":"tavily"}}`
	cfgSnapshot = `{"revision":0,"policy":` + cfgDefaultPolicy + `}`
	cfgProxy    = `{"enabled":true,"protocol":"socks5","host":"proxy.example","port":1080,"authEnabled":true,` +
		`"username":"me","bypassList":[],"autoBypassDomains":["*.corp"]}`
)

func cfgMutate(kind, value string) string {
	return `{"expectedRevision":3,"operation":{"kind":"` + kind + `","value":` + value + `}}`
}

func policyValidCases(t testing.TB) []cfgCase {
	q, m := OpRuntimePolicyQuery, OpRuntimePolicyMutate
	wide := strings.Repeat("😀", 128) // 256 UTF-16 units
	custom := cfgEdit(t, cfgSnapshot,
		"revision=9007199254740991",
		"policy/networkProxy="+cfgProxy,
		"policy/personalization/displayName="+cfgStr(wide),
		"policy/personalization/assistantTone="+cfgStr(strings.Repeat("t", 4096)),
		"policy/chatDefaults/permissionMode=\"bypass\"",
		"policy/webSearch/enabled=true",
		"policy/privacy/incognitoActive=true",
	)
	return []cfgCase{
		{name: "query input", op: q, in: `{}`},
		{name: "default snapshot", op: q, out: true, in: cfgSnapshot},
		{name: "custom snapshot", op: q, out: true, in: custom},
		{name: "integral revision forms", op: q, out: true, in: cfgEdit(t, cfgSnapshot, "revision=1e2"),
			want: cfgEdit(t, cfgSnapshot, "revision=100")},
		{name: "negative zero revision", op: q, out: true, in: cfgEdit(t, cfgSnapshot, "revision=-0"), want: cfgSnapshot},
		{name: "disabled proxy with empty host", op: q, out: true,
			in: cfgEdit(t, cfgSnapshot, `policy/networkProxy/host=""`)},
		{name: "host of 255 units", op: q, out: true,
			in: cfgEdit(t, cfgSnapshot, "policy/networkProxy/host="+cfgStr(strings.Repeat("h", 255)))},
		{name: "bypass list of 256 entries of 512 units", op: q, out: true,
			in: cfgEdit(t, cfgSnapshot, "policy/networkProxy/bypassList="+cfgStrings(cfgDistinct(80, 512)...))},
		{name: "port bounds", op: q, out: true, in: cfgEdit(t, cfgSnapshot, "policy/networkProxy/port=65535")},
		{name: "port 1", op: q, out: true, in: cfgEdit(t, cfgSnapshot, "policy/networkProxy/port=1")},
		{name: "username 256", op: q, out: true,
			in: cfgEdit(t, cfgSnapshot, "policy/networkProxy/username="+cfgStr(strings.Repeat("u", 256)))},

		{name: "set proxy", op: m, in: cfgMutate("set_network_proxy", cfgProxy)},
		{name: "set proxy trims host", op: m,
			in:   cfgMutate("set_network_proxy", cfgEdit(t, cfgProxy, "host=\"\u3000 proxy.example\ufeff\u00a0\"")),
			want: cfgMutate("set_network_proxy", cfgProxy)},
		{name: "set proxy blank host while disabled", op: m,
			in:   cfgMutate("set_network_proxy", cfgEdit(t, cfgProxy, "enabled=false", `host="   "`)),
			want: cfgMutate("set_network_proxy", cfgEdit(t, cfgProxy, "enabled=false", `host=""`))},
		{name: "set personalization", op: m, in: cfgMutate("set_personalization", `{"displayName":"Ada","assistantTone":""}`)},
		{name: "set memory", op: m, in: cfgMutate("set_memory", `{"enabled":false,"agentReadEnabled":true}`)},
		{name: "set workspace instructions", op: m, in: cfgMutate("set_workspace_instructions", `{"enabled":false}`)},
		{name: "set privacy", op: m, in: cfgMutate("set_privacy", `{"incognitoActive":true}`)},
		{name: "set chat defaults", op: m, in: cfgMutate("set_chat_defaults", `{"permissionMode":"execute"}`)},
		{name: "set web search", op: m, in: cfgMutate("set_web_search", `{"enabled":true,"defaultProvider":"tavily"}`)},
		{name: "expected revision 0", op: m, in: `{"expectedRevision":0,"operation":{"kind":"set_privacy","value":{"incognitoActive":false}}}`},

		{name: "committed", op: m, out: true, in: `{"kind":"committed","revision":4}`},
		{name: "revision conflict", op: m, out: true, in: `{"kind":"revision_conflict","expectedRevision":3,"actualRevision":5}`},
	}
}

// cfgDistinct returns n distinct strings of exactly size ASCII characters.
func cfgDistinct(n, size int) []string {
	out := make([]string, n)
	for i := range out {
		p := strconv.Itoa(i) + "-"
		out[i] = p + strings.Repeat("x", size-len(p))
	}
	return out
}

func TestRuntimePolicyValid(t *testing.T) { cfgCheckValid(t, policyValidCases(t)) }

func TestRuntimePolicyInvalid(t *testing.T) {
	q, m := OpRuntimePolicyQuery, OpRuntimePolicyMutate
	snap := func(edits ...string) string { return cfgEdit(t, cfgSnapshot, edits...) }
	proxy := func(edits ...string) string {
		return cfgMutate("set_network_proxy", cfgEdit(t, cfgProxy, edits...))
	}
	cases := []cfgCase{
		{name: "query input with key", op: q, in: `{"x":1}`},
		{name: "query input array", op: q, in: `[]`},
		{name: "query input null", op: q, in: `null`},

		{name: "snapshot not an object", op: q, out: true, in: `[]`},
		{name: "snapshot missing revision", op: q, out: true, in: snap("-revision")},
		{name: "snapshot extra key", op: q, out: true, in: snap("extra=1")},
		{name: "revision negative", op: q, out: true, in: snap("revision=-1")},
		{name: "revision fractional", op: q, out: true, in: snap("revision=1.5")},
		{name: "revision beyond safe", op: q, out: true, in: snap("revision=9007199254740992")},
		{name: "revision string", op: q, out: true, in: snap(`revision="1"`)},
		{name: "policy null", op: q, out: true, in: snap("policy=null")},
		{name: "policy missing section", op: q, out: true, in: snap("-policy/privacy")},
		{name: "policy extra section", op: q, out: true, in: snap(`policy/subagents={"presets":[]}`)},
		{name: "proxy extra key", op: q, out: true, in: snap("policy/networkProxy/password=\"x\"")},
		{name: "proxy missing key", op: q, out: true, in: snap("-policy/networkProxy/username")},
		{name: "proxy enabled string", op: q, out: true, in: snap(`policy/networkProxy/enabled="true"`)},
		{name: "proxy protocol", op: q, out: true, in: snap(`policy/networkProxy/protocol="ftp"`)},
		{name: "proxy protocol uppercase", op: q, out: true, in: snap(`policy/networkProxy/protocol="HTTP"`)},
		{name: "host 256", op: q, out: true, in: snap("policy/networkProxy/host=" + cfgStr(strings.Repeat("h", 256)))},
		{name: "host 128 astral = 256 units", op: q, out: true, in: snap("policy/networkProxy/host=" + cfgStr(strings.Repeat("😀", 128)))},
		{name: "host C0", op: q, out: true, in: snap(`policy/networkProxy/host="a\u0001b"`)},
		{name: "host DEL", op: q, out: true, in: snap(`policy/networkProxy/host="a\u007fb"`)},
		{name: "host C1", op: q, out: true, in: snap(`policy/networkProxy/host="a\u0085b"`)},
		{name: "host tab", op: q, out: true, in: snap(`policy/networkProxy/host="a\tb"`)},
		{name: "host not canonical", op: q, out: true, in: snap(`policy/networkProxy/host=" 127.0.0.1"`)},
		{name: "host not canonical nbsp", op: q, out: true, in: snap(`policy/networkProxy/host="127.0.0.1\u00a0"`)},
		{name: "host blank disabled not canonical", op: q, out: true, in: snap(`policy/networkProxy/host="  "`)},
		{name: "host empty while enabled", op: q, out: true, in: snap("policy/networkProxy/enabled=true", `policy/networkProxy/host=""`)},
		{name: "host number", op: q, out: true, in: snap("policy/networkProxy/host=1")},
		{name: "port 0", op: q, out: true, in: snap("policy/networkProxy/port=0")},
		{name: "port 65536", op: q, out: true, in: snap("policy/networkProxy/port=65536")},
		{name: "port fractional", op: q, out: true, in: snap("policy/networkProxy/port=80.5")},
		{name: "authEnabled null", op: q, out: true, in: snap("policy/networkProxy/authEnabled=null")},
		{name: "username 257", op: q, out: true, in: snap("policy/networkProxy/username=" + cfgStr(strings.Repeat("u", 257)))},
		{name: "bypass 257 entries", op: q, out: true, in: snap("policy/networkProxy/bypassList=" + cfgStrings(cfgDistinct(257, 8)...))},
		{name: "bypass empty entry", op: q, out: true, in: snap(`policy/networkProxy/bypassList=[""]`)},
		{name: "bypass entry 513", op: q, out: true, in: snap("policy/networkProxy/bypassList=" + cfgStrings(strings.Repeat("b", 513)))},
		{name: "bypass duplicate", op: q, out: true, in: snap(`policy/networkProxy/bypassList=["a","b","a"]`)},
		{name: "bypass non-string", op: q, out: true, in: snap(`policy/networkProxy/bypassList=["a",1]`)},
		{name: "bypass null", op: q, out: true, in: snap("policy/networkProxy/bypassList=null")},
		{name: "auto bypass duplicate", op: q, out: true, in: snap(`policy/networkProxy/autoBypassDomains=["x","x"]`)},
		{name: "auto bypass object", op: q, out: true, in: snap(`policy/networkProxy/autoBypassDomains={}`)},
		{name: "displayName 257", op: q, out: true, in: snap("policy/personalization/displayName=" + cfgStr(strings.Repeat("d", 257)))},
		{name: "displayName 129 astral", op: q, out: true, in: snap("policy/personalization/displayName=" + cfgStr(strings.Repeat("😀", 129)))},
		{name: "assistantTone 4097", op: q, out: true, in: snap("policy/personalization/assistantTone=" + cfgStr(strings.Repeat("t", 4097)))},
		{name: "memory missing key", op: q, out: true, in: snap("-policy/memory/agentReadEnabled")},
		{name: "memory extra key", op: q, out: true, in: snap("policy/memory/x=true")},
		{name: "workspace enabled number", op: q, out: true, in: snap("policy/workspaceInstructions/enabled=1")},
		{name: "privacy extra key", op: q, out: true, in: snap("policy/privacy/x=true")},
		{name: "permission mode explore", op: q, out: true, in: snap(`policy/chatDefaults/permissionMode="explore"`)},
		{name: "chat defaults thinking level", op: q, out: true, in: snap(`policy/chatDefaults/thinkingLevel="high"`)},
		{name: "web search provider", op: q, out: true, in: snap(`policy/webSearch/defaultProvider="google"`)},
		{name: "web search enabled missing", op: q, out: true, in: snap("-policy/webSearch/enabled")},

		{name: "mutate not an object", op: m, in: `"x"`},
		{name: "mutate extra key", op: m, in: cfgEdit(t, cfgMutate("set_privacy", `{"incognitoActive":true}`), "x=1")},
		{name: "mutate missing operation", op: m, in: `{"expectedRevision":1}`},
		{name: "mutate expected revision negative", op: m, in: cfgEdit(t, cfgMutate("set_privacy", `{"incognitoActive":true}`), "expectedRevision=-1")},
		{name: "mutate unknown kind", op: m, in: cfgMutate("set_subagents", `{"presets":[]}`)},
		{name: "mutate patch kind", op: m, in: cfgMutate("patch_agent_settings", `{}`)},
		{name: "mutate kind number", op: m, in: `{"expectedRevision":1,"operation":{"kind":1,"value":{}}}`},
		{name: "mutate missing value", op: m, in: `{"expectedRevision":1,"operation":{"kind":"set_privacy"}}`},
		{name: "mutate operation extra key", op: m, in: cfgEdit(t, cfgMutate("set_privacy", `{"incognitoActive":true}`), "operation/x=1")},
		{name: "mutate value of other kind", op: m, in: cfgMutate("set_memory", `{"incognitoActive":true}`)},
		{name: "mutate value null", op: m, in: cfgMutate("set_memory", `null`)},
		{name: "mutate proxy blank host enabled", op: m, in: proxy(`host=" \u3000 "`)},
		{name: "mutate proxy host control", op: m, in: proxy(`host=" a\u0000"`)},
		{name: "mutate proxy port", op: m, in: proxy("port=0")},
		{name: "mutate chat defaults mode", op: m, in: cfgMutate("set_chat_defaults", `{"permissionMode":"plan"}`)},
		{name: "mutate web search partial", op: m, in: cfgMutate("set_web_search", `{"enabled":true}`)},

		{name: "result not an object", op: m, out: true, in: `1`},
		{name: "result missing kind", op: m, out: true, in: `{"revision":1}`},
		{name: "result unknown kind", op: m, out: true, in: `{"kind":"accepted","revision":1}`},
		{name: "committed extra key", op: m, out: true, in: `{"kind":"committed","revision":1,"x":1}`},
		{name: "committed negative", op: m, out: true, in: `{"kind":"committed","revision":-1}`},
		{name: "conflict missing actual", op: m, out: true, in: `{"kind":"revision_conflict","expectedRevision":1}`},
		{name: "conflict fractional", op: m, out: true, in: `{"kind":"revision_conflict","expectedRevision":1,"actualRevision":2.5}`},
	}
	cfgCheckInvalid(t, cases)
}

func TestRuntimePolicySnapshotSizeBound(t *testing.T) {
	// Grow the assistant tone and bypass entries until the encoded snapshot is
	// exactly at the limit, then one byte past it.
	base := DefaultRuntimePolicy()
	base.Personalization.AssistantTone = strings.Repeat("t", 4096)
	base.NetworkProxy.BypassList = cfgDistinct(80, 512)
	s := RuntimePolicySnapshot{Revision: 1, Policy: base}
	n, err := EncodedSize(s)
	if err != nil {
		t.Fatal(err)
	}
	missing := RuntimePolicySnapshotMaxBytes - n
	if missing <= 0 || missing > 100*515 {
		t.Fatalf("unexpected base size %d", n)
	}
	// A new autoBypassDomains entry of k characters costs k+3 bytes (quotes
	// and comma).
	add := func(k int) {
		list := &s.Policy.NetworkProxy.AutoBypassDomains
		entry := strconv.Itoa(len(*list)) + "-"
		*list = append(*list, entry+strings.Repeat("y", k-len(entry)))
		missing -= k + 3
	}
	for missing > 515 {
		add(512)
	}
	if missing >= 6 {
		add(missing - 3)
	}
	s.Policy.Personalization.DisplayName = strings.Repeat("n", missing)
	b, err := Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != RuntimePolicySnapshotMaxBytes {
		t.Fatalf("constructed snapshot has %d bytes", len(b))
	}
	if _, err := cfgDecode(t, OpRuntimePolicyQuery, true, string(b)); err != nil {
		t.Fatalf("snapshot at the limit: %v", err)
	}
	s.Policy.Personalization.DisplayName += "n"
	b, _ = Marshal(s)
	_, err = cfgDecode(t, OpRuntimePolicyQuery, true, string(b))
	cfgWantInvalidFrame(t, "snapshot one byte over", err)
}

func TestDefaultRuntimePolicy(t *testing.T) {
	b, err := Marshal(DefaultRuntimePolicy())
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != cfgDefaultPolicy {
		t.Fatalf("defaults encode to\n%s\nwant\n%s", b, cfgDefaultPolicy)
	}
	// Each call returns fresh slices.
	p := DefaultRuntimePolicy()
	p.NetworkProxy.BypassList[0] = "changed"
	if DefaultRuntimePolicy().NetworkProxy.BypassList[0] != "metaso.cn" {
		t.Fatal("DefaultRuntimePolicy shares its slices")
	}
	v, _ := Parse([]byte(cfgDefaultPolicy))
	got, err := DecodeRuntimePolicy(v)
	if err != nil || !reflect.DeepEqual(got, DefaultRuntimePolicy()) {
		t.Fatalf("DecodeRuntimePolicy(defaults) = %#v, %v", got, err)
	}
}

func TestRuntimePolicyNormalizeVersusCanonical(t *testing.T) {
	v, _ := Parse([]byte(cfgEdit(t, cfgDefaultPolicy, `networkProxy/host=" proxy.lan "`)))
	if _, err := DecodeRuntimePolicy(v); err == nil {
		t.Fatal("DecodeRuntimePolicy accepted an untrimmed host")
	}
	p, err := NormalizeRuntimePolicy(v)
	if err != nil {
		t.Fatal(err)
	}
	if p.NetworkProxy.Host != "proxy.lan" {
		t.Fatalf("host = %q", p.NetworkProxy.Host)
	}
}

func TestRuntimePolicyOperationApply(t *testing.T) {
	got, err := cfgDecode(t, OpRuntimePolicyMutate, false, cfgMutate("set_memory", `{"enabled":false,"agentReadEnabled":true}`))
	if err != nil {
		t.Fatal(err)
	}
	in := got.(RuntimePolicyMutateInput)
	if in.ExpectedRevision != 3 || in.Operation.Kind() != PolicySetMemory {
		t.Fatalf("decoded %#v", in)
	}
	p := in.Operation.Apply(DefaultRuntimePolicy())
	want := DefaultRuntimePolicy()
	want.Memory = MemoryPolicy{Enabled: false, AgentReadEnabled: true}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("Apply = %#v", p)
	}
	if _, err := Marshal(RuntimePolicyOperation{}); err == nil {
		t.Fatal("an operation without a value encoded")
	}
}

func TestRuntimePolicyNilListsEncodeAsArrays(t *testing.T) {
	p := DefaultRuntimePolicy()
	p.NetworkProxy.BypassList, p.NetworkProxy.AutoBypassDomains = nil, nil
	b, err := Marshal(RuntimePolicySnapshot{Revision: 2, Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"bypassList":[],"autoBypassDomains":[]`) {
		t.Fatalf("nil lists encode as %s", b)
	}
	if _, err := cfgDecode(t, OpRuntimePolicyQuery, true, string(b)); err != nil {
		t.Fatal(err)
	}
}
