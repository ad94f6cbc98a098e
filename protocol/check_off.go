//go:build !makadebug

package protocol

// CheckResults reports whether the host re-validates each result it sends
// by encoding it, parsing the encoding and decoding it with the operation's
// output codec. It is true only in a build with the makadebug tag; the
// codecs' own tests and fuzz targets check the encoders against the
// decoders, and the client decodes every response it reads.
const CheckResults = false
