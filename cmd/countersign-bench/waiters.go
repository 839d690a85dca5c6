package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/protocol"
)

// benchWaiters parks cfg.Waiters long-polls (?wait=60) on a few proposals
// awaiting confirmation, then measures the process's RSS growth per
// waiter, its CPU use while nothing changes, and, approving the proposals
// one after the other, the time from each approval to each waiter's
// answer. The baseline is the same wake-up with a single waiter. Client
// and server share this process, so the memory per waiter includes the
// client's side of each connection (a goroutine and a socket).
func benchWaiters(ctx context.Context, cfg config, srv *server, rep *report) error {
	n := cfg.Waiters
	if lim := fdLimit(); 2*n+256 > lim {
		n = (lim - 256) / 2
		rep.notes = append(rep.notes, fmt.Sprintf("waiters: %d requested, %d measured (open file limit %d; each waiter holds two sockets here)", cfg.Waiters, n, lim))
	}
	var single []time.Duration
	for range 5 {
		lat, err := wake(ctx, srv, 1, 1, nil)
		if err != nil {
			return err
		}
		single = append(single, lat...)
	}
	var rss, cpu float64
	lat, err := wake(ctx, srv, n, min(n, 10), func() error {
		var err error
		rss, cpu, err = idle(n)
		return err
	})
	if err != nil {
		return err
	}
	slices.Sort(single)
	slices.Sort(lat)
	rep.rows = append(rep.rows, row{Name: fmt.Sprintf("long-poll waiters, %s, %d at once", srv.kind, n),
		Product: fmt.Sprintf("%.1f KiB RSS per waiter, idle CPU %.1f%% of a core, approval→answer p50 %s, p99 %s",
			rss/1024, cpu*100, ms(pct(lat, 0.5)), ms(pct(lat, 0.99))),
		Baseline: fmt.Sprintf("one waiter: approval→answer p50 %s, p99 %s", ms(pct(single, 0.5)), ms(pct(single, 0.99))),
		Ratio:    float64(pct(lat, 0.99)) / float64(pct(single, 0.99)), RatioOf: "p99 wake-up vs one waiter"})
	return nil
}

// wake parks n long-polls spread over k fresh proposals, calls parked once
// they all wait, approves the proposals one by one and returns each
// waiter's time from its proposal's approval to its answer.
func wake(ctx context.Context, srv *server, n, k int, parked func() error) ([]time.Duration, error) {
	ids := make([]string, k)
	digests := make([]string, k)
	revs := make([]int64, k)
	for i := range k {
		p, err := srv.propose(ctx, i)
		if err != nil {
			return nil, err
		}
		ids[i], digests[i], revs[i] = p.ID, p.ArgsDigest, p.Revision
	}
	addr := strings.TrimPrefix(srv.base, "http://")
	answered := make([]time.Time, n)
	var (
		wg      sync.WaitGroup
		ready   sync.WaitGroup
		errMu   sync.Mutex
		failure error
	)
	fail := func(err error) {
		errMu.Lock()
		if failure == nil {
			failure = err
		}
		errMu.Unlock()
	}
	var auths atomic.Int64
	count := func(q string) {
		if strings.Contains(q, "key_hash") {
			auths.Add(1)
		}
	}
	srv.trace.Store(&count)
	defer srv.trace.Store(nil)
	if parked != nil {
		runtime.GC()
		debug.FreeOSMemory()
		var err error
		if baseRSS, err = rssBytes(); err != nil {
			return nil, err
		}
	}
	ready.Add(n)
	for i := range n {
		wg.Go(func() {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				ready.Done()
				fail(err)
				return
			}
			defer conn.Close()
			_, err = fmt.Fprintf(conn, "GET /api/v1/proposals/%s?wait=60&since=%d HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", ids[i%k], revs[i%k], addr, srv.key)
			ready.Done()
			if err != nil {
				fail(err)
				return
			}
			conn.SetReadDeadline(time.Now().Add(90 * time.Second))
			br := bufio.NewReaderSize(conn, 64)
			line, err := br.ReadString('\n')
			answered[i] = time.Now()
			if err != nil {
				fail(err)
				return
			}
			if !strings.HasPrefix(line, "HTTP/1.1 200") {
				fail(fmt.Errorf("long-poll answered %q", strings.TrimSpace(line)))
			}
		})
	}
	ready.Wait()
	if err := settle(ctx, srv, n, &auths); err != nil {
		return nil, err
	}
	if parked != nil {
		if err := parked(); err != nil {
			return nil, err
		}
	}
	approved := make([]time.Time, k)
	for j := range k {
		approved[j] = time.Now()
		if _, err := srv.app.Protocol.Confirm(ctx, protocol.ConfirmInput{Reviewer: srv.reviewer, ProposalID: ids[j],
			DigestSeen: digests[j], Evidence: auth.ApprovalEvidence(srv.reviewer, nil)}); err != nil {
			return nil, err
		}
	}
	wg.Wait()
	if failure != nil {
		return nil, failure
	}
	lat := make([]time.Duration, n)
	for i := range n {
		lat[i] = answered[i].Sub(approved[i%k])
	}
	return lat, nil
}

// settle waits until the server has authenticated all n requests (one
// agent lookup each), then a moment for each to load its proposal and
// park. The server's background work (dispatch, sweeps, heartbeats) keeps
// running statements, so quiet alone cannot tell.
func settle(ctx context.Context, srv *server, n int, auths *atomic.Int64) error {
	deadline := time.Now().Add(2 * time.Minute)
	for auths.Load() < int64(n) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("only %d of %d long-polls reached the server", auths.Load(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	return nil
}

// idle measures, with n waiters parked, the RSS they added per waiter
// (against baseRSS, read just before they were started, both after a
// collection) and the CPU the process uses over two quiet seconds.
func idle(n int) (perWaiter, cpu float64, err error) {
	runtime.GC()
	debug.FreeOSMemory()
	with, err := rssBytes()
	if err != nil {
		return 0, 0, err
	}
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	t := time.Now()
	time.Sleep(2 * time.Second)
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	used := tv(ru1.Utime) + tv(ru1.Stime) - tv(ru0.Utime) - tv(ru0.Stime)
	return float64(with-baseRSS) / float64(n), used.Seconds() / time.Since(t).Seconds(), nil
}

// baseRSS is the process's RSS just before the waiters were started.
var baseRSS int64

func tv(t syscall.Timeval) time.Duration {
	return time.Duration(t.Sec)*time.Second + time.Duration(t.Usec)*time.Microsecond
}

func rssBytes() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("reading RSS: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/self/status")
}

// fdLimit raises the open-file limit to its maximum and returns it.
func fdLimit() int {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 1024
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
	return int(l.Cur)
}
