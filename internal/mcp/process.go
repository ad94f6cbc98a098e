package mcp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/maka-agent/maka/internal/tools"
)

// Bounds of a server's stderr in the host log.
const (
	stderrLineMaxBytes = 1024
	stderrMaxLines     = 1000
)

// stopGrace is how long a stopped server has between SIGTERM and SIGKILL
// of its process group.
const stopGrace = 2 * time.Second

// baseEnv are the host's environment variables a stdio server inherits;
// everything else it gets is what its configuration names (the host's
// own environment may hold API keys).
var baseEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TMPDIR", "TERM", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME"}

// process is a stdio server's process group.
type process struct {
	cmd    *exec.Cmd
	pgid   int
	exited chan struct{} // closed once the leader was reaped
	err    error         // the leader's Wait error, set before exited closes
	stderr chan struct{} // closed once the stderr logger ended
	errR   *os.File      // the read end of its stderr
	stop   sync.Once
}

// startProcess starts a server's command in its own process group (with
// SIGKILL at the host's death), its stdin and stdout as the returned pipe
// ends, its stderr logged line by line.
func startProcess(cfg Server, env []string, log *slog.Logger) (p *process, stdout io.ReadCloser, stdin io.WriteCloser, err error) {
	cmd := exec.Command(cfg.Command, cfg.Args...)
	cmd.Dir = cfg.Cwd
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, errors.Join(err, inR.Close(), inW.Close())
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, errors.Join(err, inR.Close(), inW.Close(), outR.Close(), outW.Close())
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	startErr := cmd.Start()
	// The child holds its ends now; the host keeps only its own.
	closeErr := errors.Join(inR.Close(), outW.Close(), errW.Close())
	if startErr != nil {
		_ = errors.Join(inW.Close(), outR.Close(), errR.Close())
		return nil, nil, nil, startErr
	}
	_ = closeErr
	p = &process{cmd: cmd, pgid: cmd.Process.Pid, exited: make(chan struct{}), stderr: make(chan struct{}), errR: errR}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	go func() {
		defer close(p.stderr)
		logStderr(errR, log.With("mcp_server", cfg.Name, "pid", p.pgid))
	}()
	return p, outR, inW, nil
}

// logStderr logs each line of r (cut to stderrLineMaxBytes, redacted), at
// most stderrMaxLines of them, and drains the rest until EOF.
func logStderr(r io.Reader, log *slog.Logger) {
	br := bufio.NewReaderSize(r, stderrLineMaxBytes)
	lines := 0
	for {
		line, err := br.ReadSlice('\n')
		long := errors.Is(err, bufio.ErrBufferFull)
		if len(line) > 0 {
			switch lines++; {
			case lines <= stderrMaxLines:
				text := string(line)
				if long {
					text += " …"
				}
				log.Info("mcp server stderr", "line", tools.Redact(trimNewline(text)))
			case lines == stderrMaxLines+1:
				log.Warn("mcp server stderr: further lines are not logged", "max_lines", stderrMaxLines)
			}
		}
		for long { // the rest of an over-long line
			_, err = br.ReadSlice('\n')
			long = errors.Is(err, bufio.ErrBufferFull)
		}
		if err != nil {
			return
		}
	}
}

func trimNewline(s string) string {
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == '\r') {
		s = s[:len(s)-1]
	}
	return s
}

// terminate ends the process group: SIGTERM, then SIGKILL after
// stopGrace; the whole group is killed even once the leader exited, so
// nothing it started outlives it. It returns once the leader is reaped.
func (p *process) terminate() {
	p.stop.Do(func() {
		_ = syscall.Kill(-p.pgid, syscall.SIGTERM)
		t := time.NewTimer(stopGrace)
		select {
		case <-p.exited:
		case <-t.C:
		}
		t.Stop()
		_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
		<-p.exited
		// A process that left the group may still hold stderr open: the
		// logger gets a moment to read what is left, then its end closes.
		t = time.NewTimer(time.Second)
		select {
		case <-p.stderr:
		case <-t.C:
		}
		t.Stop()
		_ = p.errR.Close()
		<-p.stderr
	})
}

// exitReason says how the leader ended (after exited closed).
func (p *process) exitReason() string {
	select {
	case <-p.exited:
	default:
		return "the server closed its connection"
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Sprintf("the server was killed by signal %s", ws.Signal())
		}
		return fmt.Sprintf("the server exited with status %d", ee.ExitCode())
	}
	if p.err != nil {
		return "the server ended: " + p.err.Error()
	}
	return "the server exited"
}
