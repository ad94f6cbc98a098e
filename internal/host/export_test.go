package host

// EnqueueDeferred is Enqueue for a producer that will call Wake soon, as the
// reader queues its responses: frames accumulate into one vectored write
// instead of waking the writer for each.
func (ow *OutboundWriter) EnqueueDeferred(frame []byte, done Settler) error {
	return ow.enqueue(frame, done, false)
}

// The host's tests run with result checks on, as a makadebug build does.
func init() { checkResults = true }
