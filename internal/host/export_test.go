package host

// The host's tests run with result checks on, as a makadebug build does.
func init() { checkResults = true }
