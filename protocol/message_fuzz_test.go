package protocol

import "testing"

func FuzzMessage(f *testing.F) {
	shSeed(f, messageValidCases(f))
	f.Add([]byte(shQueue))
	f.Fuzz(func(t *testing.T, data []byte) {
		shFuzzOps(t, data, OpTurnMessageSubmit, OpQueueRetract, OpTurnInterrupt)
		if v, err := Parse(data); err == nil {
			shFuzzCodec(t, "queue", func(d *D, v Value) any { return decodeQueueProjection(d, v, "queue") }, v)
		}
	})
}
