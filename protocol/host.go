package protocol

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
