package transport

import (
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func unixPair(t *testing.T) (client, server *Conn) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	cc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	sc := <-accepted
	if sc == nil {
		t.Fatal("accept failed")
	}
	client, server = New(cc), New(sc)
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func code(err error) string {
	var te *Error
	if errors.As(err, &te) {
		return te.Code
	}
	var pe *protocol.ProtocolError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func TestFramesAcrossWritesAndInOneWrite(t *testing.T) {
	c, s := unixPair(t)
	go func() {
		c.Write([]byte(`{"a":`))
		c.Write([]byte("1}\n{\"b\":2}\n{\"c\":\"é"), []byte("\"}\r\n"))
	}()
	for _, want := range []string{`{"a":1}`, `{"b":2}`, `{"c":"é"}`} {
		v, err := s.ReadFrame(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := protocol.Marshal(v); string(got) != want {
			t.Fatalf("got %s want %s", got, want)
		}
	}
}

func TestHalfCloseIsACleanEOFAndWritingStillWorks(t *testing.T) {
	c, s := unixPair(t)
	if err := c.WriteValue(map[string]int{"x": 1}); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadFrame(time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadFrame(time.Second); code(err) != CodeReadEOF {
		t.Fatalf("err %v, want read_eof", err)
	}
	if _, err := s.ReadFrame(time.Second); code(err) != CodeReadEOF {
		t.Fatalf("EOF is not sticky: %v", err)
	}
	if err := s.WriteValue(map[string]int{"reply": 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadFrame(time.Second); err != nil {
		t.Fatalf("client did not receive after its half-close: %v", err)
	}
}

func TestPartialFrameAtEOF(t *testing.T) {
	c, s := unixPair(t)
	c.Write([]byte(`{"a":1}` + "\n" + `{"b"`))
	c.CloseWrite()
	if _, err := s.ReadFrame(time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadFrame(time.Second); code(err) != protocol.CodeInvalidFrame {
		t.Fatalf("err %v, want invalid_frame", err)
	}
}

func TestReadTimeoutIsNotFatal(t *testing.T) {
	c, s := unixPair(t)
	if _, err := s.ReadFrame(20 * time.Millisecond); code(err) != CodeReadTimeout {
		t.Fatalf("err %v, want read_timeout", err)
	}
	c.Write([]byte("{}\n"))
	if _, err := s.ReadFrame(time.Second); err != nil {
		t.Fatalf("read after a timeout: %v", err)
	}
}

func TestConcurrentReadIsRefused(t *testing.T) {
	c, s := unixPair(t)
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		close(started)
		_, err := s.ReadFrame(5 * time.Second)
		done <- err
	}()
	<-started
	// The first reader may not have entered ReadFrame yet; retry until the
	// refusal is observed, then let the first read finish.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.ReadFrame(time.Millisecond)
		if code(err) == CodeConcurrentRead {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("second reader was not refused: %v", err)
		}
	}
	c.Write([]byte("{}\n"))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestOversizedFrameFailsBeforeItsLF(t *testing.T) {
	c, s := unixPair(t)
	go c.Write([]byte(strings.Repeat("a", protocol.MaxFrameBytes+10)))
	if _, err := s.ReadFrame(time.Second); code(err) != protocol.CodeFrameTooLarge {
		t.Fatalf("err %v, want frame_too_large", err)
	}
}

func TestFramingErrorsAreReported(t *testing.T) {
	for in, want := range map[string]string{
		"\n":             protocol.CodeInvalidFrame,
		"{\"a\":\xff}\n": protocol.CodeInvalidUTF8,
		"{\n":            protocol.CodeInvalidJSON,
	} {
		c, s := unixPair(t)
		c.Write([]byte(in))
		if _, err := s.ReadFrame(time.Second); code(err) != want {
			t.Errorf("%q: err %v, want %s", in, err, want)
		}
	}
}

func TestCloseIsIdempotentAndObservable(t *testing.T) {
	_, s := unixPair(t)
	select {
	case <-s.Closed():
		t.Fatal("closed before Close")
	default:
	}
	s.Close()
	s.Close()
	select {
	case <-s.Closed():
	default:
		t.Fatal("Closed not signalled")
	}
	if _, err := s.ReadFrame(time.Second); code(err) != CodeClosed {
		t.Fatalf("read after close: %v", err)
	}
	if err := s.Write([]byte("{}\n")); code(err) != CodeClosed {
		t.Fatalf("write after close: %v", err)
	}
}

// A read waiting on a silent socket never holds up a write on the same
// connection: the host answers while its reader waits for more.
func TestWriteIsNotHeldByAWaitingRead(t *testing.T) {
	c, s := unixPair(t)
	read := make(chan error, 1)
	go func() {
		_, err := s.ReadFrame(0) // waits: the peer has sent nothing
		read <- err
	}()
	if err := s.Write([]byte("{\"a\":1}\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadFrame(10 * time.Second); err != nil {
		t.Fatalf("the write did not reach the peer while a read waited: %v", err)
	}
	if err := c.Write([]byte("{}\n")); err != nil {
		t.Fatal(err)
	}
	if err := <-read; err != nil {
		t.Fatal(err)
	}
}

// A reset connection must never read as a clean end of stream.
func TestResetIsNotACleanEOF(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	server := New(sc)
	defer server.Close()
	if err := cc.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	cc.Close() // sends a reset
	// Wait until the reset has arrived: the socket polls readable.
	raw, err := sc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var polled int
	_ = raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		polled, _ = unix.Poll(fds, 10_000)
	})
	if polled != 1 {
		t.Fatal("the reset never arrived")
	}
	_, err = server.ReadFrame(time.Second)
	if code(err) == CodeReadEOF {
		t.Fatalf("a reset connection read as a clean end of stream: %v", err)
	}
}

// A read EOF looks the same after a half-close and after a close; only the
// close is a peer that has gone.
func TestPeerClosedTellsACloseFromAHalfClose(t *testing.T) {
	c, s := unixPair(t)
	if s.PeerClosed() {
		t.Fatal("open peer reported closed")
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadFrame(0); code(err) != CodeReadEOF {
		t.Fatalf("after half-close: %v, want read_eof", err)
	}
	if s.PeerClosed() {
		t.Fatal("half-closed peer reported closed")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if !s.PeerClosed() {
		t.Fatal("closed peer not reported closed")
	}
}
