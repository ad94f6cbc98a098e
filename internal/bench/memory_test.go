package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/protocol"
)

// memoryScript is the scripted model of the memory benchmark: a step that
// streams a little text and reads the workspace's notes (a 4 KiB result
// that stays in the session's history), then a step that answers.
const memoryScript = `{"steps":[
 {"events":[{"text":"Reading the notes. "},{"toolCall":{"name":"Read","input":{"path":"notes.txt"}}}],"finish":"tool-calls","usage":{"input":1200,"output":20}},
 {"events":[{"text":"Read for "},{"echo":true},{"text":". "},{"text":"The notes are short","repeat":8},{"text":"."}],"usage":{"input":2400,"output":60}}
]}`

// Shape of the memory benchmark's load.
const (
	memSessions = 16
	memTurns    = 1000
	memConns    = 1000
)

// BenchmarkHostMemory reports the memory of a real `maka host serve`
// process (the executable written back to disk, like an installed one):
// VmRSS and its private part (RssAnon: what is not clean executable or
// library pages) 0.5 s, 10 s and 60 s after it answered, a client having
// asked for its status (a connection, a handshake and one host.status, as
// `maka host status` does) at 3 s and nothing else happening; 1 s and 10 s
// after 1,000 turns of 16 sessions (16 clients at once, scripted model,
// each turn a Read call and two streamed steps); 10 s after those sessions
// are archived; and, on a second host process, the memory per idle
// handshaken connection, measured with 1,000 of them.
// Run with -benchtime=1x; one iteration takes about 100 s.
func BenchmarkHostMemory(b *testing.B) {
	bin := buildMaka(b)
	script := filepath.Join(b.TempDir(), "script.json")
	if err := os.WriteFile(script, []byte(memoryScript), 0o600); err != nil {
		b.Fatal(err)
	}
	for range b.N {
		pid, root, _ := serveProcess(b, bin, "--model-script", script)
		ready := time.Now()
		at := func(d time.Duration) procMemory {
			time.Sleep(time.Until(ready.Add(d)))
			return readMemory(b, pid)
		}
		report := func(m procMemory, name string) {
			b.ReportMetric(float64(m.rss)/1024, name+"-RSS-MiB")
			b.ReportMetric(float64(m.anon)/1024, name+"-private-MiB")
		}
		report(at(500*time.Millisecond), "idle0.5s")
		// The client's look at 3 s: the host returns what it left free
		// 5-6 s later (OnQuiet), before the 10 s figure.
		time.Sleep(time.Until(ready.Add(3 * time.Second)))
		askStatus(b, root)
		report(at(10*time.Second), "idle10s")
		report(at(60*time.Second), "idle60s")

		sessions := runMemoryTurns(b, root)
		done := time.Now()
		time.Sleep(time.Second)
		report(readMemory(b, pid), "turns1000")
		time.Sleep(time.Until(done.Add(10 * time.Second)))
		report(readMemory(b, pid), "turns1000-idle10s")

		archiveSessions(b, root, sessions)
		time.Sleep(10 * time.Second)
		report(readMemory(b, pid), "archived-idle10s")

		pid, root, endpoint := serveProcess(b, bin)
		time.Sleep(500 * time.Millisecond)
		idle := readMemory(b, pid)
		loaded := idleConnections(b, root, endpoint, pid)
		b.ReportMetric(float64(loaded.rss-idle.rss)/memConns, "KiB/idle-conn")
		b.ReportMetric(float64(loaded.anon-idle.anon)/memConns, "private-KiB/idle-conn")
	}
}

// askStatus connects to the host, reads its status and disconnects.
func askStatus(b *testing.B, root string) {
	b.Helper()
	res, err := client.Connect(context.Background(), client.Options{RootPath: root, Surface: protocol.SurfaceInspect})
	if err != nil || res.Kind != client.Connected {
		b.Fatalf("connect: %v %+v", err, res)
	}
	defer res.Conn.Close()
	if _, err := res.Conn.Status(context.Background()); err != nil {
		b.Fatal(err)
	}
}

func connectRun(b *testing.B, root string) *client.Conn {
	b.Helper()
	res, err := client.Connect(context.Background(), client.Options{RootPath: root, Surface: protocol.SurfaceRun, RequestTimeout: 60 * time.Second})
	if err != nil || res.Kind != client.Connected {
		b.Fatalf("connect: %v %+v", err, res)
	}
	return res.Conn
}

// runMemoryTurns creates memSessions sessions, each with its own workspace
// holding notes.txt, and runs memTurns turns over them, one client per
// session, all at once. It returns the session ids.
func runMemoryTurns(b *testing.B, root string) []string {
	b.Helper()
	notes := strings.Repeat("These are the notes of the memory benchmark.\n", 4096/45+1)[:4096]
	ids := make([]string, memSessions)
	errs := make(chan error, memSessions)
	var wg sync.WaitGroup
	for s := range memSessions {
		ids[s] = fmt.Sprintf("mem-%d", s)
		ws := b.TempDir()
		if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte(notes), 0o600); err != nil {
			b.Fatal(err)
		}
		c := connectRun(b, root)
		defer c.Close()
		createSessionIn(b, c, ids[s], ws)
		turns := memTurns / memSessions
		if s < memTurns%memSessions {
			turns++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- sessionTurns(c, ids[s], turns)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return ids
}

func createSessionIn(b *testing.B, c *client.Conn, id, workspace string) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Call(ctx, protocol.OpSessionCreate, protocol.SessionCreateInput{
		SessionID: id, Workspace: protocol.HostPathWorkspace(workspace), PermissionMode: protocol.PermissionModeBypass,
	}); err != nil {
		b.Fatal(err)
	}
}

// sessionTurns runs n turns of session one after the other, each to its
// terminal snapshot at a subscriber.
func sessionTurns(c *client.Conn, session string, n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sub, err := c.OpenSubscription(ctx, session)
	if err != nil {
		return err
	}
	defer sub.Close(ctx)
	for i := range n {
		turnID := fmt.Sprintf("%s-t%d", session, i)
		if _, err := c.StartTurn(ctx, protocol.TurnStartInput{SessionID: session, TurnID: turnID, Content: protocol.MessageContent{Text: "read the notes " + turnID}}); err != nil {
			return fmt.Errorf("turn %s: %w", turnID, err)
		}
		for done := false; !done; {
			fr, err := sub.Next(ctx)
			if err != nil {
				return fmt.Errorf("turn %s: subscription: %w", turnID, err)
			}
			p, ok := fr.(protocol.ProjectionFrame)
			if r := p.Snapshot.RootTurn; ok && r != nil && r.TurnID == turnID && r.Status.Terminal() {
				if r.Status != protocol.TurnCompleted {
					return fmt.Errorf("turn %s ended %+v", turnID, r)
				}
				done = true
			}
		}
	}
	return nil
}

func archiveSessions(b *testing.B, root string, ids []string) {
	b.Helper()
	c := connectRun(b, root)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, id := range ids {
		if _, err := c.Call(ctx, protocol.OpSessionLifecycleSet, protocol.SessionLifecycleSetInput{SessionID: id, Action: protocol.SessionActionArchive}); err != nil {
			b.Fatalf("archive %s: %v", id, err)
		}
	}
}

// idleConnections opens memConns handshaken connections that then stay
// silent, and returns the host's memory 500 ms after the last one; they are
// closed when the benchmark ends.
func idleConnections(b *testing.B, root, endpoint string, pid int) procMemory {
	b.Helper()
	for i := range memConns {
		c, err := net.Dial("unix", endpoint)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		hello, _ := json.Marshal(map[string]any{"kind": "hello", "clientInstanceId": fmt.Sprintf("idle-%d", i), "surface": "inspect", "protocolMin": 0, "protocolMax": 0})
		if _, err := c.Write(append(hello, '\n')); err != nil {
			b.Fatal(err)
		}
		if _, err := bufio.NewReader(c).ReadSlice('\n'); err != nil {
			b.Fatal(err)
		}
	}
	res, err := client.Connect(context.Background(), client.Options{RootPath: root, Surface: protocol.SurfaceInspect})
	if err != nil || res.Kind != client.Connected {
		b.Fatal("observer", err)
	}
	st, err := res.Conn.Status(context.Background())
	res.Conn.Close()
	if err != nil || st.Connections != memConns+1 {
		b.Fatalf("status %+v %v", st, err)
	}
	time.Sleep(500 * time.Millisecond)
	return readMemory(b, pid)
}
