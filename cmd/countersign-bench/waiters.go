package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/countersign/countersign/models/protocol"
)

// benchWaiters parks cfg.Waiters long-polls (?wait=60) on a few proposals
// awaiting confirmation, then measures the server's RSS growth per waiter,
// its goroutines per waiter, its CPU use while nothing changes, and,
// approving the proposals one after the other, the time from each approval
// to each waiter's answer. The baseline is the same wake-up with a single
// waiter. The waiting clients run in a child process (this binary again,
// see waiterClient), so that memory and CPU are the server's alone.
func benchWaiters(ctx context.Context, cfg config, srv *server, rep *report) error {
	n := cfg.Waiters
	if lim := fdLimit(); n+256 > lim {
		n = lim - 256
		rep.notes = append(rep.notes, fmt.Sprintf("waiters: %d requested, %d measured (open file limit %d)", cfg.Waiters, n, lim))
	}
	var single []time.Duration
	for range 5 {
		lat, err := wake(ctx, srv, 1, 1, nil)
		if err != nil {
			return err
		}
		single = append(single, lat...)
	}
	var m idleFigures
	lat, err := wake(ctx, srv, n, min(n, 10), func() error {
		var err error
		m, err = idle(n)
		if err == nil && cfg.MemProfile != "" {
			err = writeHeapProfile(cfg.MemProfile)
		}
		return err
	})
	if err != nil {
		return err
	}
	slices.Sort(single)
	slices.Sort(lat)
	rep.rows = append(rep.rows, row{Name: fmt.Sprintf("long-poll waiters, %s, %d at once", srv.kind, n),
		Product: fmt.Sprintf("%.1f KiB server RSS per waiter (heap %.1f KiB, stacks %.1f KiB, %.1f goroutines), idle CPU %.1f%% of a core, approval→answer p50 %s, p99 %s",
			m.rss/1024, m.heap/1024, m.stack/1024, m.goroutines, m.cpu*100, ms(pct(lat, 0.5)), ms(pct(lat, 0.99))),
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
	spec := waiterSpec{Addr: strings.TrimPrefix(srv.base, "http://"), Key: srv.key}
	for i := range k {
		p, err := srv.propose(ctx, i)
		if err != nil {
			return nil, err
		}
		ids[i], digests[i] = p.ID, p.ArgsDigest
		spec.Paths = append(spec.Paths, fmt.Sprintf("/api/v1/proposals/%s?wait=60&since=%d", p.ID, p.Revision))
	}
	spec.N = n
	if parked != nil {
		runtime.GC()
		debug.FreeOSMemory()
		var err error
		if baseRSS, err = rssBytes(); err != nil {
			return nil, err
		}
		baseGoroutines = runtime.NumGoroutine()
		runtime.ReadMemStats(&baseMem)
	}
	cl, err := startWaiterClient(ctx, spec)
	if err != nil {
		return nil, err
	}
	defer cl.stop()
	if err := cl.parked(); err != nil {
		return nil, err
	}
	if err := settle(ctx, srv, n); err != nil {
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
			DigestSeen: digests[j], AMR: []string{"pwd"}}); err != nil {
			return nil, err
		}
	}
	answered, err := cl.answers()
	if err != nil {
		return nil, err
	}
	lat := make([]time.Duration, n)
	for i := range n {
		lat[i] = answered[i].Sub(approved[i%k])
	}
	return lat, nil
}

// waiterClientEnv, when set in its environment, makes this binary the
// client side of the waiter measurement: it reads a waiterSpec on stdin.
const waiterClientEnv = "COUNTERSIGN_BENCH_WAITER_CLIENT"

// waiterSpec is what the client process is to do: N long-polls, the i-th
// on Paths[i % len(Paths)].
type waiterSpec struct {
	Addr  string
	Key   string
	Paths []string
	N     int
}

// waiterClient is the child process's side. It opens spec.N connections,
// sends one long-poll on each, writes "parked" on stdout once every request
// is sent, and, when every answer arrived, one line per waiter with the
// wall-clock time of its answer's status line in Unix nanoseconds (the
// parent reads the same clock). Any failure ends it with a message on
// stderr and exit status 1.
func waiterClient(stdin io.Reader, stdout io.Writer) error {
	var spec waiterSpec
	if err := json.NewDecoder(stdin).Decode(&spec); err != nil {
		return fmt.Errorf("reading the spec: %w", err)
	}
	if lim := fdLimit(); spec.N+64 > lim {
		return fmt.Errorf("%d waiters need more open files than the limit of %d", spec.N, lim)
	}
	answered := make([]int64, spec.N)
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
	ready.Add(spec.N)
	for i := range spec.N {
		wg.Go(func() {
			conn, err := net.Dial("tcp", spec.Addr)
			if err != nil {
				ready.Done()
				fail(err)
				return
			}
			defer conn.Close()
			_, err = fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n",
				spec.Paths[i%len(spec.Paths)], spec.Addr, spec.Key)
			ready.Done()
			if err != nil {
				fail(err)
				return
			}
			conn.SetReadDeadline(time.Now().Add(90 * time.Second))
			br := bufio.NewReaderSize(conn, 64)
			line, err := br.ReadString('\n')
			answered[i] = time.Now().UnixNano()
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
	fmt.Fprintln(stdout, "parked")
	wg.Wait()
	if failure != nil {
		return failure
	}
	w := bufio.NewWriter(stdout)
	for _, t := range answered {
		fmt.Fprintln(w, t)
	}
	return w.Flush()
}

// waiterClientMain runs waiterClient when this process was started as the
// client (see waiterClientEnv) and then exits; otherwise it returns.
func waiterClientMain() {
	if os.Getenv(waiterClientEnv) == "" {
		return
	}
	if err := waiterClient(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "waiter client:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// clientProc is a running waiter client.
type clientProc struct {
	cmd    *exec.Cmd
	out    *bufio.Reader
	stderr *strings.Builder
	n      int
}

func startWaiterClient(ctx context.Context, spec waiterSpec) (*clientProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	in, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), waiterClientEnv+"=1")
	cmd.Stdin = bytes.NewReader(in)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &clientProc{cmd: cmd, out: bufio.NewReader(out), stderr: &stderr, n: spec.N}, nil
}

// fail is err with what the client said on stderr.
func (c *clientProc) fail(err error) error {
	c.cmd.Wait()
	if s := strings.TrimSpace(c.stderr.String()); s != "" {
		return fmt.Errorf("%w: %s", err, s)
	}
	return err
}

// parked returns once the client sent every request.
func (c *clientProc) parked() error {
	line, err := c.out.ReadString('\n')
	if err != nil || line != "parked\n" {
		return c.fail(fmt.Errorf("waiter client did not park (%q, %v)", line, err))
	}
	return nil
}

// answers returns when each waiter had its answer.
func (c *clientProc) answers() ([]time.Time, error) {
	out := make([]time.Time, c.n)
	for i := range c.n {
		line, err := c.out.ReadString('\n')
		if err != nil {
			return nil, c.fail(fmt.Errorf("waiter client: %d of %d answers (%v)", i, c.n, err))
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
		if err != nil {
			return nil, c.fail(fmt.Errorf("waiter client said %q", line))
		}
		out[i] = time.Unix(0, ns)
	}
	if err := c.cmd.Wait(); err != nil {
		return nil, c.fail(err)
	}
	return out, nil
}

// stop ends the client if it still runs.
func (c *clientProc) stop() {
	if c.cmd.ProcessState == nil {
		c.cmd.Process.Kill()
		c.cmd.Wait()
	}
}

// settle waits until the server holds all n long-polls parked (each
// authenticated, its proposal loaded, subscribed to its changes), then a
// moment for the last to reach its select.
func settle(ctx context.Context, srv *server, n int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for srv.app.Protocol.Waiting() < n {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("only %d of %d long-polls parked on the server", srv.app.Protocol.Waiting(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	return nil
}

// idleFigures are what idle measures.
type idleFigures struct {
	rss        float64 // bytes of RSS per waiter
	goroutines float64 // per waiter
	cpu        float64 // share of one core while nothing changes
	heap       float64 // bytes of Go heap in use per waiter
	stack      float64 // bytes of goroutine stacks per waiter
}

// idle measures, with n waiters parked, the RSS and goroutines they added
// per waiter (against baseRSS and baseGoroutines, read just before they
// were started, both after a collection) and the CPU the process uses over
// two quiet seconds.
func idle(n int) (idleFigures, error) {
	runtime.GC()
	debug.FreeOSMemory()
	with, err := rssBytes()
	if err != nil {
		return idleFigures{}, err
	}
	g := runtime.NumGoroutine()
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	t := time.Now()
	time.Sleep(2 * time.Second)
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	used := tv(ru1.Utime) + tv(ru1.Stime) - tv(ru0.Utime) - tv(ru0.Stime)
	return idleFigures{rss: float64(with-baseRSS) / float64(n), goroutines: float64(g-baseGoroutines) / float64(n),
		heap:  (float64(mem.HeapInuse) - float64(baseMem.HeapInuse)) / float64(n),
		stack: (float64(mem.StackInuse) - float64(baseMem.StackInuse)) / float64(n),
		cpu:   used.Seconds() / time.Since(t).Seconds()}, nil
}

// baseRSS and baseGoroutines are the process's RSS and goroutines just
// before the waiters were started.
var (
	baseRSS        int64
	baseGoroutines int
	baseMem        runtime.MemStats
)

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

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("heap").WriteTo(f, 0)
}
