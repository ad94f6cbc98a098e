// Package e2e holds end-to-end tests of the host over its real socket.
package e2e
