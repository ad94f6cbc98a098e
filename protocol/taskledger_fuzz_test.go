package protocol

import "testing"

func FuzzTaskLedger(f *testing.F) {
	shSeed(f, taskValidCases(f))
	f.Add([]byte(shTaskFull))
	f.Fuzz(func(t *testing.T, data []byte) {
		shFuzzOps(t, data, OpTaskLedgerQuery)
		if v, err := Parse(data); err == nil {
			shFuzzCodec(t, "task", func(d *D, v Value) any { return decodeTask(d, v, "task") }, v)
		}
	})
}
