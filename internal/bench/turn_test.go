package bench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/domain"
	"github.com/maka-agent/maka/internal/domaintest"
	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/protocol"
)

// timedProvider measures the time spent inside the provider, so that the
// host's own overhead can be separated from it.
type timedProvider struct {
	p     model.Provider
	spent atomic.Int64 // nanoseconds
}

func (t *timedProvider) Stream(ctx context.Context, req model.Request, emit func(model.Event) error) (model.Finish, error) {
	start := time.Now()
	defer func() { t.spent.Add(int64(time.Since(start))) }()
	return t.p.Stream(ctx, req, emit)
}

// startDomainHost runs the full host composition on a fresh root (on the
// machine's disk, like a real root) and returns it with a connected client.
func startDomainHost(b *testing.B, opts domain.Options) (*domaintest.Host, *client.Conn) {
	b.Helper()
	h := domaintest.Start(b, "", opts)
	return h, h.Connect(b, protocol.SurfaceRun, 30*time.Second)
}

func createSession(b *testing.B, c *client.Conn, id string) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Call(ctx, protocol.OpSessionCreate, protocol.SessionCreateInput{
		SessionID: id, Workspace: protocol.HostPathWorkspace(b.TempDir()), PermissionMode: protocol.PermissionModeBypass,
	}); err != nil {
		b.Fatal(err)
	}
}

func mustScript(b *testing.B, js string) *model.Script {
	b.Helper()
	s, err := model.ParseScript([]byte(js))
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// waitTerminal reads sub until it sees turnID's terminal root snapshot.
func waitTerminal(ctx context.Context, b *testing.B, sub *client.Subscription, turnID string) {
	for {
		fr, err := sub.Next(ctx)
		if err != nil {
			b.Fatalf("subscription: %v", err)
		}
		if p, ok := fr.(protocol.ProjectionFrame); ok {
			if r := p.Snapshot.RootTurn; r != nil && r.TurnID == turnID && r.Status.Terminal() {
				if r.Status != protocol.TurnCompleted {
					b.Fatalf("turn %s ended %+v", turnID, r)
				}
				return
			}
		}
	}
}

// BenchmarkTurnOverhead measures the host's own cost of one turn with the
// scripted provider: from turn.start to the terminal snapshot at a
// subscriber, minus the time spent inside the provider. It reports the p50
// and p99 of that per-turn overhead. Each session runs 16 turns (so
// history replay is part of the cost) before the next session starts.
func BenchmarkTurnOverhead(b *testing.B) {
	tp := &timedProvider{p: model.NewScripted(mustScript(b, `{"steps":[{"events":[{"text":"Hello! "},{"text":"All done."}],"usage":{"input":12,"output":4}}]}`), nil)}
	_, c := startDomainHost(b, domain.Options{Provider: tp})
	ctx := context.Background()
	const turnsPerSession = 16
	var sub *client.Subscription
	var session string
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		if i%turnsPerSession == 0 {
			b.StopTimer()
			if sub != nil {
				_ = sub.Close(ctx)
			}
			session = fmt.Sprintf("bench-%d", i/turnsPerSession)
			createSession(b, c, session)
			var err error
			if sub, err = c.OpenSubscription(ctx, session); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		turnID := fmt.Sprintf("turn-%d", i)
		spent := tp.spent.Load()
		start := time.Now()
		if _, err := c.StartTurn(ctx, protocol.TurnStartInput{SessionID: session, TurnID: turnID, Content: protocol.MessageContent{Text: "say hello"}}); err != nil {
			b.Fatal(err)
		}
		waitTerminal(ctx, b, sub, turnID)
		lat = append(lat, time.Since(start)-time.Duration(tp.spent.Load()-spent))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// streamScript is one step streaming n deltas "d<i>|", one every
// intervalMs.
func streamScript(n, intervalMs int) string {
	var sb strings.Builder
	sb.WriteString(`{"steps":[{"events":[`)
	for i := range n {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `{"text":"d%d|"},{"delayMs":%d}`, i, intervalMs)
	}
	sb.WriteString(`]}]}`)
	return sb.String()
}

func expectedStream(n int) string {
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, "d%d|", i)
	}
	return sb.String()
}

// BenchmarkStreamFanout runs 100 sessions whose turns stream a delta every
// 7 ms each (over 10,000 deltas/s in total) for about 4 s to 3
// subscribers per session
// (300 subscriptions over 21 connections). Every subscriber must receive
// every delta of its session, in order, with gapless sequences and no
// eviction. It reports the deltas delivered per second and the peak Go
// heap of the process (host and clients together).
func BenchmarkStreamFanout(b *testing.B) {
	const (
		sessionsN   = 100
		subscribers = 3
		perConn     = 15
		deltas      = 400
		intervalMs  = 7
	)
	h, c := startDomainHost(b, domain.Options{Script: mustScript(b, streamScript(deltas, intervalMs))})
	want := expectedStream(deltas)
	for range b.N {
		b.StopTimer()
		round := fmt.Sprintf("r%d-", time.Now().UnixNano())
		ids := make([]string, sessionsN)
		for i := range ids {
			ids[i] = fmt.Sprintf("%ss%d", round, i)
			createSession(b, c, ids[i])
		}
		type result struct {
			text   string
			frames int
			err    error
		}
		results := make(chan result, sessionsN*subscribers)
		var conns []*client.Conn
		var subs []*client.Subscription
		for s := range subscribers {
			for first := 0; first < sessionsN; first += perConn {
				res, err := client.Connect(context.Background(), client.Options{RootPath: h.Root, Surface: protocol.SurfaceInspect, RequestTimeout: 30 * time.Second})
				if err != nil || res.Kind != client.Connected {
					b.Fatalf("connect subscriber %d: %v", s, err)
				}
				conns = append(conns, res.Conn)
				for i := first; i < min(first+perConn, sessionsN); i++ {
					sub, err := res.Conn.OpenSubscription(context.Background(), ids[i])
					if err != nil {
						b.Fatal(err)
					}
					subs = append(subs, sub)
				}
			}
		}
		var peak atomic.Uint64
		stopSampling := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			t := time.NewTicker(50 * time.Millisecond)
			defer t.Stop()
			var ms runtime.MemStats
			for {
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > peak.Load() {
					peak.Store(ms.HeapInuse)
				}
				select {
				case <-t.C:
				case <-stopSampling:
					return
				}
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		for i, sub := range subs {
			turnID := "turn-" + ids[i%sessionsN]
			go func() {
				var sb strings.Builder
				frames := 0
				for {
					fr, err := sub.Next(ctx)
					if err != nil {
						results <- result{err: err}
						return
					}
					frames++
					switch f := fr.(type) {
					case protocol.DeltaFrame:
						sb.WriteString(f.Delta.Text)
					case protocol.ClosedFrame:
						results <- result{err: fmt.Errorf("subscription closed: %s", f.Reason)}
						return
					case protocol.ProjectionFrame:
						if r := f.Snapshot.RootTurn; r != nil && r.TurnID == turnID && r.Status.Terminal() {
							results <- result{text: sb.String(), frames: frames}
							return
						}
					}
				}
			}()
		}
		b.StartTimer()
		start := time.Now()
		for _, id := range ids {
			if _, err := c.StartTurn(ctx, protocol.TurnStartInput{SessionID: id, TurnID: "turn-" + id, Content: protocol.MessageContent{Text: "stream"}}); err != nil {
				b.Fatal(err)
			}
		}
		for range subs {
			r := <-results
			if r.err != nil {
				b.Fatalf("subscriber failed: %v", r.err)
			}
			if r.text != want {
				b.Fatalf("subscriber received %d bytes of text, want %d (gap, drop or reorder)", len(r.text), len(want))
			}
		}
		elapsed := time.Since(start)
		b.StopTimer()
		cancel()
		close(stopSampling)
		<-sampled
		for _, sub := range subs {
			_ = sub.Close(context.Background())
		}
		for _, cc := range conns {
			cc.Close()
		}
		b.ReportMetric(float64(sessionsN*deltas*subscribers)/elapsed.Seconds(), "delivered-deltas/s")
		b.ReportMetric(float64(sessionsN*deltas)/elapsed.Seconds(), "produced-deltas/s")
		b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MiB")
		b.StartTimer()
	}
}
