package protocol

import "strconv"

// HostStatusInput is the input of host.status: {}.
type HostStatusInput struct{}

// HostStatus is the result of host.status.
type HostStatus struct {
	HostEpoch         string    `json:"hostEpoch"`
	State             HostState `json:"state"`
	Connections       int64     `json:"connections"`
	ActiveOperations  int64     `json:"activeOperations"`
	ActiveResidencies int64     `json:"activeResidencies"`
}

func init() {
	registerEmptyInput(OpHostStatus, HostStatusInput{})
	registerCodec(OpHostStatus,
		func(d *D, v Value) any {
			d.Exact(v, "input")
			return HostStatusInput{}
		},
		func(d *D, v Value) any {
			o := d.Exact(v, "result", "hostEpoch", "state", "connections", "activeOperations", "activeResidencies")
			return HostStatus{
				HostEpoch:         o.ID("hostEpoch"),
				State:             HostState(o.Enum("state", hostStates...)),
				Connections:       o.Count("connections"),
				ActiveOperations:  o.Count("activeOperations"),
				ActiveResidencies: o.Count("activeResidencies"),
			}
		})
}

// AppendJSON appends the wire encoding of s (the fast path of Marshal).
func (s HostStatus) AppendJSON(b []byte) []byte {
	b = append(b, `{"hostEpoch":`...)
	b = appendString(b, s.HostEpoch)
	return s.AppendJSONAfterEpoch(b)
}

// AppendJSONAfterEpoch appends the encoding of s that follows its hostEpoch
// value, for encoders that keep the epoch already encoded.
func (s HostStatus) AppendJSONAfterEpoch(b []byte) []byte {
	b = append(b, `,"state":`...)
	b = appendString(b, string(s.State))
	b = append(b, `,"connections":`...)
	b = strconv.AppendInt(b, s.Connections, 10)
	b = append(b, `,"activeOperations":`...)
	b = strconv.AppendInt(b, s.ActiveOperations, 10)
	b = append(b, `,"activeResidencies":`...)
	b = strconv.AppendInt(b, s.ActiveResidencies, 10)
	return append(b, '}')
}

// Validate applies the host.status output rules to s.
func (s HostStatus) Validate() error {
	ok := s.HostEpoch != "" && UTF16Len(s.HostEpoch) <= 128 && contains(hostStates, string(s.State)) &&
		s.Connections >= 0 && s.Connections <= MaxSafeInteger &&
		s.ActiveOperations >= 0 && s.ActiveOperations <= MaxSafeInteger &&
		s.ActiveResidencies >= 0 && s.ActiveResidencies <= MaxSafeInteger
	if !ok {
		return &ProtocolError{Code: CodeInvalidFrame, Message: "host.status result is invalid"}
	}
	return nil
}
