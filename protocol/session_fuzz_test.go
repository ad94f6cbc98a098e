package protocol

import "testing"

// FuzzSessionOperations feeds arbitrary JSON through the input and result
// codecs of the four session extension operations: no decoder panics, and a
// decoded value re-encodes to bytes that decode to an equal value and encode
// identically.
func FuzzSessionOperations(f *testing.F) {
	for _, c := range ssValidCases(f) {
		if len(c.in) <= 4096 { // the page-sized examples only slow mutation down
			f.Add([]byte(c.in))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		shFuzzOps(t, data, OpSessionCreate, OpSessionCatalogQuery, OpSessionLifecycleSet, OpSessionTranscriptPage)
	})
}
