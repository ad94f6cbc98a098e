// Command maka is the Maka Runtime Host and its clients in one binary.
package main

import (
	"os"

	"github.com/maka-agent/maka/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
