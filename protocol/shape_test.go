package protocol

import (
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// One source of truth per shape: over every valid example of every codec
// in the operation table (and of the host push frames), a decoded value
// encodes to bytes that decode to an equal value; at every closed object a
// decoder accepts, the keys the encoder emits across the examples are
// exactly the keys the decoder allows; and every exported field of every
// protocol struct is set by decoding at least one example. A field added to
// the decoder only is never emitted, one added to the type and the encoder
// only is never set by decoding, so neither can go unnoticed.

// shapeCases gathers the valid examples of every shape test of the package.
func shapeCases(t *testing.T) []shCase {
	var cases []shCase
	cases = append(cases, turnValidCases()...)
	cases = append(cases, messageValidCases(t)...)
	cases = append(cases, continuityValidCases(t)...)
	cases = append(cases, permissionsValidCases()...)
	cases = append(cases, ssValidCases(t)...)
	cases = append(cases, taskValidCases(t)...)
	cases = append(cases, mcpValidCases()...)
	for _, list := range [][]cfgCase{policyValidCases(t), catalogValidCases(t), vaultValidCases(t)} {
		for _, c := range list {
			cases = append(cases, shCase(c))
		}
	}
	docs := func(op Operation, out bool, m map[string]string) {
		names := make([]string, 0, len(m))
		for name := range m {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			cases = append(cases, shCase{name: "interaction " + name, op: op, out: out, in: m[name]})
		}
	}
	docs(OpInteractionQuery, true, ixValidSnapshots())
	docs(OpInteractionQuery, false, map[string]string{"query": `{"sessionId":"s-1","interactionId":"req_9"}`})
	docs(OpInteractionAnswer, false, ixValidAnswerInputs())
	docs(OpInteractionAnswer, true, ixValidAnsweredSnapshots())
	cases = append(cases, compactValidCases()...)
	cases = append(cases, shapeExtraCases...)
	return cases
}

// shapeExtraCases cover the codecs no other shape test has examples of.
var shapeExtraCases = []shCase{
	{name: "host.status input", op: OpHostStatus, in: `{}`},
	{name: "host.status result", op: OpHostStatus, out: true,
		in: `{"hostEpoch":"e1","state":"ready","connections":2,"activeOperations":1,"activeResidencies":3}`},
}

// shapeCodec returns the codec that decodes c and the name of its side.
func shapeCodec(t *testing.T, c shCase, v Value) (Codec, string) {
	t.Helper()
	if c.op == "" {
		kind, _ := v.Get("kind")
		codec, ok := pushDecoders[kind.s]
		if !ok {
			t.Fatalf("%s: no push decoder for kind %q", c.name, kind.s)
		}
		return codec, "push " + kind.s
	}
	spec, ok := Lookup(string(c.op))
	if !ok {
		t.Fatalf("%s: unknown operation %s", c.name, c.op)
	}
	if c.out {
		return spec.output, string(c.op) + " result"
	}
	return spec.input, string(c.op) + " input"
}

var shapeIndex = regexp.MustCompile(`\[\d+\]`)

// shapeSite is one closed object shape a decoder accepts, named by the
// keys it allows: a shape nested in several operations (a message content,
// a task) is one site, and each variant of a union is its own.
type shapeSite string

func TestEveryShapeHasOneSourceOfTruth(t *testing.T) {
	emitted := map[shapeSite]map[string]bool{} // keys the encoder emitted
	where := map[shapeSite]string{}            // a codec and path of each site
	covered := map[string]bool{}               // sides with an example
	fields := map[reflect.Type][]bool{}        // fields decoding has set
	for _, c := range shapeCases(t) {
		v, err := Parse([]byte(c.in))
		if err != nil {
			t.Fatalf("%s: test JSON does not parse: %v", c.name, err)
		}
		codec, side := shapeCodec(t, c, v)
		if codec == nil {
			t.Errorf("%s: %s has no codec", c.name, side)
			continue
		}
		d := &D{}
		got := codec(d, v)
		if d.err != nil {
			t.Errorf("%s: %v", c.name, d.err)
			continue
		}
		covered[side] = true
		shapeFields(reflect.ValueOf(got), fields)
		b, err := Marshal(got)
		if err != nil {
			t.Errorf("%s: Marshal: %v", c.name, err)
			continue
		}
		ev, err := Parse(b)
		if err != nil {
			t.Errorf("%s: encoding does not parse: %v", c.name, err)
			continue
		}
		d = &D{closed: func(path string, o Value, required, optional []string) {
			allowed := append(slices.Clone(required), optional...)
			sort.Strings(allowed)
			path = shapeIndex.ReplaceAllString(path, "")
			site := shapeSite(strings.Join(allowed, ","))
			keys := emitted[site]
			if keys == nil {
				keys = map[string]bool{}
				emitted[site] = keys
				where[site] = side + " " + path
			}
			for _, m := range o.obj {
				keys[m.Key] = true
			}
		}}
		again := codec(d, ev)
		if d.err != nil {
			t.Errorf("%s: encoding does not decode: %v\n%.300s", c.name, d.err, b)
			continue
		}
		if !reflect.DeepEqual(got, again) {
			t.Errorf("%s: encoding decodes to a different value\n%#v\n%#v", c.name, got, again)
		}
	}

	for site, keys := range emitted {
		for key := range strings.SplitSeq(string(site), ",") {
			if key != "" && !keys[key] {
				t.Errorf("%s accepts %q, which no example's encoding emits (keys %s)", where[site], key, site)
			}
		}
	}
	for _, spec := range Operations() {
		for _, side := range []string{" input", " result"} {
			if !covered[string(spec.Key)+side] {
				t.Errorf("%s%s has no valid example", spec.Key, side)
			}
		}
	}
	for kind := range pushDecoders {
		if !covered["push "+kind] {
			t.Errorf("push frame %s has no valid example", kind)
		}
	}
	for typ, set := range fields {
		for i, ok := range set {
			if f := typ.Field(i); f.IsExported() && !ok {
				t.Errorf("%s.%s is not set by decoding any example", typ.Name(), f.Name)
			}
		}
	}
}

// shapeFields records, for every protocol struct reachable from v, which
// exported fields hold something (a non-empty slice or map, a non-nil
// pointer or interface, a non-zero value).
func shapeFields(v reflect.Value, seen map[reflect.Type][]bool) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			shapeFields(v.Elem(), seen)
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			shapeFields(v.Index(i), seen)
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			shapeFields(it.Value(), seen)
		}
	case reflect.Struct:
		typ := v.Type()
		if typ.PkgPath() != reflect.TypeFor[D]().PkgPath() {
			return
		}
		set := seen[typ]
		if set == nil {
			set = make([]bool, typ.NumField())
			seen[typ] = set
		}
		for i := range typ.NumField() {
			if !typ.Field(i).IsExported() {
				continue
			}
			f := v.Field(i)
			switch f.Kind() {
			case reflect.Slice, reflect.Map:
				set[i] = set[i] || f.Len() > 0
			default:
				set[i] = set[i] || !f.IsZero()
			}
			shapeFields(f, seen)
		}
	}
}
