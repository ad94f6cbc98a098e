package soak_test

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"
)

// fdCounts returns the number of open file descriptors of the process and
// how many of them are sockets.
func fdCounts() (total, sockets int) {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1, -1
	}
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.HasPrefix(target, "socket:") {
			sockets++
		}
	}
	// The directory listing's own descriptor is counted too, every time.
	return len(entries), sockets
}

// procStatusKiB reads a "<field>: <n> kB" line of /proc/self/status.
func procStatusKiB(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return -1
		}
		return n
	}
	return -1
}

// sampler records the peaks of the Go heap, the goroutine count and the
// open descriptors while a test runs.
type sampler struct {
	stop chan struct{}
	done chan struct{}

	mu             sync.Mutex
	peakHeap       uint64
	peakGoroutines int
	peakFDs        int
	peakRSSKiB     int64
	samples        int
}

func startSampler(every time.Duration) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			fds, _ := fdCounts()
			g := runtime.NumGoroutine()
			rss := procStatusKiB("VmRSS")
			s.mu.Lock()
			s.peakHeap = max(s.peakHeap, ms.HeapInuse)
			s.peakGoroutines = max(s.peakGoroutines, g)
			s.peakFDs = max(s.peakFDs, fds)
			s.peakRSSKiB = max(s.peakRSSKiB, rss)
			s.samples++
			s.mu.Unlock()
			select {
			case <-tick.C:
			case <-s.stop:
				return
			}
		}
	}()
	return s
}

// finish stops sampling and waits for the sampler to exit.
func (s *sampler) finish() {
	close(s.stop)
	<-s.done
}

// settle polls cond until it holds or the deadline passes; it reports
// whether cond held. It is a bounded wait on a process-wide figure (the
// goroutine or descriptor count) that no event announces.
func settle(within time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return cond()
		}
	}
}

// goroutineDump returns the stacks of every goroutine, grouped.
func goroutineDump() string {
	var b bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
	return b.String()
}

// fdDump lists the open descriptors and their targets.
func fdDump() string {
	entries, _ := os.ReadDir("/proc/self/fd")
	var b strings.Builder
	for _, e := range entries {
		target, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		b.WriteString(e.Name() + " -> " + target + "\n")
	}
	return b.String()
}
