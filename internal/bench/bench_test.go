// Package bench holds the host's committed benchmarks. Each round-trip
// benchmark has an echo-server twin over the same socket type, driven by the
// same client code, so results are read as a ratio (docs/benchmarks.md).
package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/storageroot"
)

// echoServer is a trivial NDJSON echo server: it reads lines and writes each
// back, flushing whenever it has no more buffered input.
type echoServer struct {
	ln   net.Listener
	path string
	wg   sync.WaitGroup
}

func startEcho(b *testing.B) *echoServer {
	b.Helper()
	dir, err := os.MkdirTemp("/tmp", "maka-echo-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "e.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	e := &echoServer{ln: ln, path: path}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				defer c.Close()
				r := bufio.NewReaderSize(c, 64*1024)
				w := bufio.NewWriterSize(c, 64*1024)
				for {
					line, err := r.ReadSlice('\n')
					if err != nil {
						return
					}
					if _, err := w.Write(line); err != nil {
						return
					}
					if r.Buffered() == 0 {
						if err := w.Flush(); err != nil {
							return
						}
					}
				}
			}()
		}
	}()
	b.Cleanup(func() {
		ln.Close()
		e.wg.Wait()
	})
	return e
}

// startHost runs a bare kernel on a fresh root and returns its socket path.
func startHost(b *testing.B) string {
	b.Helper()
	root := filepath.Join(b.TempDir(), "root")
	capability, err := storageroot.Resolve(root, storageroot.KindInteractive)
	if err != nil {
		b.Fatal(err)
	}
	owner, err := storageroot.TryAcquireOwner(capability)
	if err != nil || owner == nil {
		b.Fatal("owner", err)
	}
	k, err := host.Start(context.Background(), host.Options{Owner: owner, DisableIdleExit: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = k.Close(context.Background())
		if ns, err := storageroot.ControlNamespace(); err == nil {
			os.RemoveAll(filepath.Join(ns, capability.RootID()))
		}
	})
	return k.Endpoint()
}

var hello = []byte(`{"kind":"hello","clientInstanceId":"bench","surface":"inspect","protocolMin":0,"protocolMax":0}` + "\n")

// dialHost connects and completes the handshake.
func dialHost(b *testing.B, path string, handshake bool) (net.Conn, *bufio.Reader) {
	c, err := net.Dial("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	r := bufio.NewReaderSize(c, 64*1024)
	if handshake {
		if _, err := c.Write(hello); err != nil {
			b.Fatal(err)
		}
		if _, err := r.ReadSlice('\n'); err != nil {
			b.Fatal(err)
		}
	}
	return c, r
}

func statusRequest(i int) []byte {
	return []byte(fmt.Sprintf(`{"requestId":"r-%d","operation":"host.status","input":{}}`+"\n", i))
}

// sequential measures one request at a time over one connection.
func sequential(b *testing.B, path string, handshake bool) {
	c, r := dialHost(b, path, handshake)
	defer c.Close()
	req := statusRequest(1)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := r.ReadSlice('\n'); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// pipelined keeps `depth` requests in flight on each of `conns` connections.
func pipelined(b *testing.B, path string, handshake bool, conns, depth int) {
	type pipe struct {
		c net.Conn
		r *bufio.Reader
	}
	pipes := make([]pipe, conns)
	for i := range pipes {
		c, r := dialHost(b, path, handshake)
		defer c.Close()
		pipes[i] = pipe{c, r}
	}
	per := (b.N + conns - 1) / conns
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	errc := make(chan error, 2*conns)
	for _, p := range pipes {
		credits := make(chan struct{}, depth)
		for range depth {
			credits <- struct{}{}
		}
		wg.Add(2)
		go func() { // writer: batch whatever credits are available
			defer wg.Done()
			w := bufio.NewWriterSize(p.c, 64*1024)
			var buf []byte
			send := func(i int) { // request ids are unique: responses come back in any order
				buf = append(buf[:0], `{"requestId":"r-`...)
				buf = strconv.AppendInt(buf, int64(i), 10)
				buf = append(buf, `","operation":"host.status","input":{}}`+"\n"...)
				w.Write(buf)
			}
			for sent := 0; sent < per; {
				<-credits
				send(sent)
				sent++
				for sent < per {
					select {
					case <-credits:
						send(sent)
						sent++
						continue
					default:
					}
					break
				}
				if err := w.Flush(); err != nil {
					errc <- err
					return
				}
			}
		}()
		go func() { // reader
			defer wg.Done()
			for range per {
				if _, err := p.r.ReadSlice('\n'); err != nil {
					errc <- err
					return
				}
				credits <- struct{}{}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errc)
	for err := range errc {
		if !errors.Is(err, io.EOF) {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(per*conns)/b.Elapsed().Seconds(), "req/s")
}

func BenchmarkSequential(b *testing.B) {
	b.Run("echo", func(b *testing.B) { sequential(b, startEcho(b).path, false) })
	b.Run("host.status", func(b *testing.B) { sequential(b, startHost(b), true) })
}

func BenchmarkPipelined4x32(b *testing.B) {
	b.Run("echo", func(b *testing.B) { pipelined(b, startEcho(b).path, false, 4, 32) })
	b.Run("host.status", func(b *testing.B) { pipelined(b, startHost(b), true, 4, 32) })
}

var _ = time.Second
