package protocol

import (
	"strings"
	"testing"
)

func permissionsValidCases() []shCase {
	rule := `{"effect":"allow","rule":"Bash(go test ./...)"}`
	long := `{"effect":"deny","rule":"` + shRep("x", PermissionRuleMaxBytes) + `"}`
	var many []string
	for range PermissionRulesMax {
		many = append(many, rule)
	}
	return []shCase{
		{name: "session query", op: OpSessionPermissionsQuery, in: `{"sessionId":"s1"}`},
		{name: "session set mode only", op: OpSessionPermissionsSet, in: `{"sessionId":"s1","permissionMode":"execute"}`},
		{name: "session set everything", op: OpSessionPermissionsSet,
			in: `{"sessionId":"s1","permissionMode":"explore","sandbox":"read-only","rules":[` + rule + `],"addRules":[` + long + `]}`},
		{name: "session set thinking", op: OpSessionPermissionsSet, in: `{"sessionId":"s1","thinking":"high"}`},
		{name: "session result with thinking", op: OpSessionPermissionsQuery, out: true,
			in: `{"sessionId":"s1","permissionMode":"ask","sandbox":"off","rules":[],"rootRules":[],"sandboxAvailable":true,"thinking":"low"}`},
		{name: "session set clears rules", op: OpSessionPermissionsSet, in: `{"sessionId":"s1","rules":[]}`},
		{name: "session set adds nothing", op: OpSessionPermissionsSet, in: `{"sessionId":"s1","addRules":[]}`, want: `{"sessionId":"s1"}`},
		{name: "session set key order canonical", op: OpSessionPermissionsSet,
			in:   `{"addRules":[` + rule + `],"sandbox":"off","sessionId":"s1"}`,
			want: `{"sessionId":"s1","sandbox":"off","addRules":[` + rule + `]}`},
		{name: "session result", op: OpSessionPermissionsSet, out: true,
			in: `{"sessionId":"s1","permissionMode":"ask","sandbox":"workspace-write","rules":[` + strings.Join(many, ",") + `],"rootRules":[],"sandboxAvailable":true}`},
		{name: "session result without a sandbox", op: OpSessionPermissionsQuery, out: true,
			in: `{"sessionId":"s1","permissionMode":"bypass","sandbox":"off","rules":[],"rootRules":[` + rule + `],"sandboxAvailable":false,"sandboxReason":"kernel has no Landlock (ABI 0)"}`},
		{name: "root query", op: OpRootPermissionsQuery, in: `{}`},
		{name: "root set nothing", op: OpRootPermissionsSet, in: `{}`},
		{name: "root set", op: OpRootPermissionsSet, in: `{"sandbox":"read-only","rules":[` + rule + `]}`},
		{name: "root result", op: OpRootPermissionsSet, out: true, in: `{"sandbox":"workspace-write","rules":[]}`},
		{name: "root query result", op: OpRootPermissionsQuery, out: true, in: `{"sandbox":"read-only","rules":[` + rule + `]}`},
	}
}

func TestPermissionsValid(t *testing.T) { shCheckValid(t, permissionsValidCases()) }

func TestPermissionsInvalid(t *testing.T) {
	rule := `{"effect":"allow","rule":"Read"}`
	var many []string
	for range PermissionRulesMax + 1 {
		many = append(many, rule)
	}
	shCheckInvalid(t, []shCase{
		{name: "query without id", op: OpSessionPermissionsQuery, in: `{}`},
		{name: "query extra key", op: OpSessionPermissionsQuery, in: `{"sessionId":"s1","x":1}`},
		{name: "unknown mode", op: OpSessionPermissionsSet, in: `{"sessionId":"s1","permissionMode":"yolo"}`},
		{name: "unknown sandbox", op: OpSessionPermissionsSet, in: `{"sessionId":"s1","sandbox":"none"}`},
		{name: "unknown thinking", op: OpSessionPermissionsSet, in: `{"sessionId":"s1","thinking":"max"}`},
		{name: "empty thinking", op: OpSessionPermissionsSet, in: `{"sessionId":"s1","thinking":""}`},
		{name: "rule effect", op: OpSessionPermissionsSet, in: `{"sessionId":"s1","rules":[{"effect":"maybe","rule":"Read"}]}`},
		{name: "empty rule", op: OpSessionPermissionsSet, in: `{"sessionId":"s1","addRules":[{"effect":"allow","rule":""}]}`},
		{name: "rule too long", op: OpSessionPermissionsSet, in: `{"sessionId":"s1","rules":[{"effect":"allow","rule":"` + shRep("x", PermissionRuleMaxBytes+1) + `"}]}`},
		{name: "rule extra key", op: OpSessionPermissionsSet, in: `{"sessionId":"s1","rules":[{"effect":"allow","rule":"Read","why":"x"}]}`},
		{name: "too many rules", op: OpSessionPermissionsSet, in: `{"sessionId":"s1","rules":[` + strings.Join(many, ",") + `]}`},
		{name: "result missing rootRules", op: OpSessionPermissionsQuery, out: true,
			in: `{"sessionId":"s1","permissionMode":"ask","sandbox":"off","rules":[],"sandboxAvailable":true}`},
		{name: "root query with a key", op: OpRootPermissionsQuery, in: `{"x":1}`},
		{name: "root result missing rules", op: OpRootPermissionsQuery, out: true, in: `{"sandbox":"off"}`},
	})
}

// FuzzPermissionOperations feeds arbitrary JSON through the codecs of the
// permission extension operations: no decoder panics, and a decoded value
// re-encodes to bytes that decode to an equal value and encode identically.
func FuzzPermissionOperations(f *testing.F) {
	shSeed(f, permissionsValidCases())
	f.Fuzz(func(t *testing.T, data []byte) {
		shFuzzOps(t, data, OpSessionPermissionsQuery, OpSessionPermissionsSet, OpRootPermissionsQuery, OpRootPermissionsSet)
	})
}
