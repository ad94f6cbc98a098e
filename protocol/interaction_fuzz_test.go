package protocol

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// ixFuzzCodec feeds data through Parse and a registered codec. A decoded
// value must encode, and its encoding must decode to an equal value that
// encodes to the same bytes.
func ixFuzzCodec(t *testing.T, op string, input bool, data []byte) {
	v, err := Parse(data)
	if err != nil {
		return
	}
	decode := ixCodec(t, op, input)
	out, err := decode(v)
	if err != nil {
		if strings.Contains(err.Error(), "decoder panic") {
			t.Fatalf("%s: %v", op, err)
		}
		ixWantInvalid(t, err)
		return
	}
	b, err := Marshal(out)
	if err != nil {
		t.Fatalf("%s: marshal %#v: %v", op, out, err)
	}
	v2, err := Parse(b)
	if err != nil {
		t.Fatalf("%s: re-parse %s: %v", op, b, err)
	}
	out2, err := decode(v2)
	if err != nil {
		t.Fatalf("%s: re-decode %s: %v", op, b, err)
	}
	if !reflect.DeepEqual(out, out2) {
		t.Fatalf("%s: re-decoded value differs\n%#v\n%#v", op, out, out2)
	}
	b2, _ := Marshal(out2)
	if !bytes.Equal(b, b2) {
		t.Fatalf("%s: encoding not stable\n%s\n%s", op, b, b2)
	}
}

// ixFuzzProjection checks decodeInteractionProjection the same way (called
// directly, so a panic fails the target).
func ixFuzzProjection(t *testing.T, data []byte) {
	v, err := Parse(data)
	if err != nil {
		return
	}
	d := &D{}
	p := decodeInteractionProjection(d, v, "interactions", "s1")
	if d.Failed() {
		ixWantInvalid(t, d.Err())
		return
	}
	b, err := Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	d2 := &D{}
	p2 := decodeInteractionProjection(d2, ixParse(t, string(b)), "interactions", "s1")
	if d2.Failed() || !reflect.DeepEqual(p, p2) {
		t.Fatalf("projection round trip: %v\n%s", d2.Err(), b)
	}
}

// FuzzInteractionQuery covers interaction.query (input and the
// InteractionSnapshot result) and the session interaction projection.
func FuzzInteractionQuery(f *testing.F) {
	f.Add([]byte(`{"sessionId":"s1","interactionId":"i1"}`))
	for _, s := range ixValidSnapshots() {
		f.Add([]byte(s))
		f.Add([]byte(`{"pending":[` + s + `]}`))
	}
	f.Add([]byte(ixBigQuestionRequest(10)))
	f.Fuzz(func(t *testing.T, data []byte) {
		ixFuzzCodec(t, "interaction.query", true, data)
		ixFuzzCodec(t, "interaction.query", false, data)
		ixFuzzProjection(t, data)
		if v, err := Parse(data); err == nil {
			if r, err := DecodeInteractionRequest(v); err == nil {
				if err := r.Validate(); err != nil {
					t.Fatalf("decoded request does not validate: %v", err)
				}
			}
		}
	})
}

// FuzzInteractionAnswer covers interaction.answer (input and the
// InteractionAnsweredSnapshot result) and the answer rules.
func FuzzInteractionAnswer(f *testing.F) {
	for _, s := range []string{
		`{"interactionId":"i1","answer":{"kind":"permission","decision":"allow","rememberForTurn":true}}`,
		`{"interactionId":"i1","answer":{"kind":"permission","decision":"deny","rememberForTurn":false}}`,
		`{"interactionId":"i1","answer":{"kind":"question","answers":["A",null,"x"]}}`,
		`{"kind":"question","answers":` + ixBigAnswers(5) + `}`,
		ixSnapshot(ixBashRequest, ixAllowRemember),
		ixSnapshot(ixBashRequest, ixAutoDeny),
		ixSnapshot(ixQuestionRequest, ixQuestionOut),
		ixSnapshot(ixQuestionRequest2, `{"kind":"question_answer","answers":[null,"C"],"committedAt":1}`),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ixFuzzCodec(t, "interaction.answer", true, data)
		ixFuzzCodec(t, "interaction.answer", false, data)
		v, err := Parse(data)
		if err != nil {
			return
		}
		// An answered snapshot's outcome is equivalent to the answer it
		// records, and that answer is acceptable for the request.
		s, err := DecodeInteractionSnapshot(v)
		if err != nil || s.Status != InteractionStatusAnswered {
			return
		}
		ans := InteractionAnswer{Kind: InteractionKindPermission, Decision: s.Outcome.Decision,
			RememberForTurn: s.Outcome.RememberForTurn}
		if s.Outcome.Kind == InteractionOutcomeQuestionAnswer {
			ans = InteractionAnswer{Kind: InteractionKindQuestion, Answers: s.Outcome.Answers}
		}
		if !AnswerAcceptable(s.Request, ans) || !EquivalentAnswer(*s.Outcome, ans) {
			t.Fatalf("stored outcome %+v is not an acceptable, equivalent answer", *s.Outcome)
		}
		if !OutcomeValidForRequest(s.Request, UserOutcome(ans, 1)) {
			t.Fatal("user outcome of an acceptable answer is not valid")
		}
	})
}
