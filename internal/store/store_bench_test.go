package store

import (
	"context"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
)

// BenchmarkAppendRunEvents measures durable appends: 64 goroutines each
// append run events through Write as fast as they can; every Write waits
// for the fsync'd commit of its batch.
func BenchmarkAppendRunEvents(b *testing.B) {
	const writers = 64
	s, err := Open(context.Background(), filepath.Join(b.TempDir(), "bench.sqlite"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := s.Close(context.Background()); err != nil {
			b.Error(err)
		}
	}()
	payload := `{"type":"text_delta","messageId":"m1","text":"hello, world"}`
	var nextWriter atomic.Int64
	ctx := context.Background()
	before := s.Stats()

	b.SetParallelism((writers + 1) / 2)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		run := "run-" + strconv.FormatInt(nextWriter.Add(1), 10)
		seq := 0
		for pb.Next() {
			seq++
			err := s.Write(ctx, func(tx *Tx) error {
				_, err := tx.Exec(`INSERT INTO run_events (session_id, run_id, seq, ts, type, payload) VALUES (?, ?, ?, ?, ?, ?)`,
					"session-1", run, seq, int64(seq), "text_delta", payload)
				return err
			})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	st := s.Stats()
	if batches := st.Batches - before.Batches; batches > 0 {
		b.ReportMetric(float64(st.Writes-before.Writes)/float64(batches), "writes/batch")
	}
}

// BenchmarkWriteLatency measures one durable Write at a time: the commit
// latency (one fsync of the WAL) a lone caller waits for.
func BenchmarkWriteLatency(b *testing.B) {
	s, err := Open(context.Background(), filepath.Join(b.TempDir(), "bench.sqlite"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := s.Close(context.Background()); err != nil {
			b.Error(err)
		}
	}()
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		err := s.Write(ctx, func(tx *Tx) error {
			_, err := tx.Exec(`INSERT INTO run_events (session_id, run_id, seq, ts, type, payload) VALUES (?, ?, ?, ?, ?, ?)`,
				"session-1", "run-1", i, int64(i), "text_delta", `{"text":"hello"}`)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
