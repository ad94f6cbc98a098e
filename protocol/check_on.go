//go:build makadebug

package protocol

// CheckResults reports whether the host re-validates each result it sends
// by encoding it, parsing the encoding and decoding it with the operation's
// output codec: true in this makadebug build.
const CheckResults = true
