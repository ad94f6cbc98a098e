package protocol

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// cfgFuzzFamily feeds data through both codecs of every operation in ops:
// decoding must not panic, and a decoded value must encode to JSON that
// decodes to an equal value and encodes to the same bytes again.
func cfgFuzzFamily(t *testing.T, ops []Operation, data []byte) {
	v, err := Parse(data)
	if err != nil {
		return
	}
	for _, op := range ops {
		spec, ok := Lookup(string(op))
		if !ok {
			t.Fatalf("unknown operation %s", op)
		}
		for _, dec := range []func(Value) (any, error){spec.DecodeInput, spec.DecodeOutput} {
			got, err := dec(v)
			if err != nil {
				var pe *ProtocolError
				if !errors.As(err, &pe) || pe.Code != CodeInvalidFrame || strings.Contains(pe.Message, "decoder panic") {
					t.Fatalf("%s: unexpected failure %v", op, err)
				}
				continue
			}
			b, err := Marshal(got)
			if err != nil {
				t.Fatalf("%s: Marshal(%#v): %v", op, got, err)
			}
			v2, err := Parse(b)
			if err != nil {
				t.Fatalf("%s: encoding does not parse: %v\n%s", op, err, b)
			}
			again, err := dec(v2)
			if err != nil {
				t.Fatalf("%s: encoding does not decode: %v\n%s", op, err, b)
			}
			if !reflect.DeepEqual(got, again) {
				t.Fatalf("%s: round trip changed the value\n%#v\n%#v", op, got, again)
			}
			b2, err := Marshal(again)
			if err != nil || string(b2) != string(b) {
				t.Fatalf("%s: encoding is not a fixed point\n%s\n%s", op, b, b2)
			}
		}
	}
}

func cfgFuzzSeed(f *testing.F, cases []cfgCase, extra ...string) {
	for _, c := range cases {
		f.Add([]byte(c.in))
	}
	for _, s := range extra {
		f.Add([]byte(s))
	}
}

func FuzzRuntimePolicy(f *testing.F) {
	cfgFuzzSeed(f, policyValidCases(f), `{"kind":"committed","revision":-0}`, `{"expectedRevision":1,"operation":null}`)
	f.Fuzz(func(t *testing.T, data []byte) {
		cfgFuzzFamily(t, []Operation{OpRuntimePolicyQuery, OpRuntimePolicyMutate}, data)
	})
}

func FuzzConnectionCatalog(f *testing.F) {
	cfgFuzzSeed(f, catalogValidCases(f),
		cfgPage("null", 2, `{"connectionIndex":1,"part":"model","itemIndex":0}`, cfgHeader0),
		cfgCreate(cfgEdit(f, cfgDraft, `baseUrl="http:\\\\[::ffff:1.2.3.4]:80/a/%2e%2E/b c"`)),
		cfgUpdate(`{"name":"n","baseUrl":"http://0x7f.1:0080/ä","enabled":true,"enabledModelIds":[]}`),
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		cfgFuzzFamily(t, []Operation{OpConnectionCatalogQuery, OpConnectionCatalogCreate, OpConnectionCatalogUpdate,
			OpConnectionCatalogRemove, OpConnectionCatalogSetDefaultTarget}, data)
	})
}

func FuzzCredentialVault(f *testing.F) {
	cfgFuzzSeed(f, vaultValidCases(f), `{"kind":"credential_stale","expected":null,"actual":null}`)
	f.Fuzz(func(t *testing.T, data []byte) {
		cfgFuzzFamily(t, []Operation{OpCredentialVaultQuery, OpCredentialVaultSet, OpCredentialVaultDelete}, data)
	})
}
