// Package soak holds the host's soak and fault tests.
package soak
