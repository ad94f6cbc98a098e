// Command rusage runs a command and writes its wall time (ns) and peak
// resident set (rusage maxrss, KiB) to a file: "rusage FILE CMD ARGS...".
// The start-up benchmarks run maka through it because Linux charges a
// child started with vfork (as os/exec starts one) the peak RSS of its
// parent at exec: the benchmark's own, tens of MiB. This small process's
// peak is what maka inherits instead, as from a shell or /usr/bin/time.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: rusage FILE CMD ARGS...")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[2], os.Args[3:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	begin := time.Now()
	err := cmd.Run()
	wall := time.Since(begin)
	if cmd.ProcessState == nil {
		fmt.Fprintln(os.Stderr, "rusage:", err)
		os.Exit(2)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if werr := os.WriteFile(os.Args[1], fmt.Appendf(nil, "%d %d\n", wall.Nanoseconds(), ru.Maxrss), 0o600); werr != nil {
		fmt.Fprintln(os.Stderr, "rusage:", werr)
		os.Exit(2)
	}
	os.Exit(cmd.ProcessState.ExitCode())
}
