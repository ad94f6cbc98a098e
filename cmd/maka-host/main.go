// Command maka-host is the Maka runtime host: `maka-host serve` (what
// `maka host serve` execs, and what clients start on demand) and the
// per-call helper every Bash command of the host runs under (this
// executable run again, entered from the sandbox package). It is the only
// executable that links the store, the model providers and the tools.
package main

import (
	"os"

	"github.com/maka-agent/maka/internal/hostproc"
)

func main() {
	os.Exit(hostproc.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
