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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/writes"
)

// benchWaiters measures what cfg.Waiters concurrent long-polls
// (?wait=60) cost the server, the waiting clients running in a child
// process (this binary again, see waiterClient) so that memory and CPU are
// the server's alone.
//
// First each waiter waits on a proposal of its own, as agents do: with all
// of them parked it measures the server's RSS growth, heap, stacks and
// goroutines per waiter and its CPU use while nothing changes, then
// approves a sample of the proposals one at a time and times each
// approval's waiter from the approval to its answer, while the others stay
// parked. The baseline is the same wake-up with a single waiter on the
// server. Then the fan-out: all waiters spread over ten proposals that
// are approved back to back, every one of them answered.
func benchWaiters(ctx context.Context, cfg config, srv *server, rep *report) error {
	n := cfg.Waiters
	if lim := fdLimit(); n+256 > lim {
		n = lim - 256
		rep.notes = append(rep.notes, fmt.Sprintf("waiters: %d requested, %d measured (open file limit %d)", cfg.Waiters, n, lim))
	}
	var single []time.Duration
	for range 20 {
		lat, _, err := wake(ctx, srv, 1, 1, []int{0}, nil)
		if err != nil {
			return err
		}
		single = append(single, lat...)
	}
	sample := make([]int, 0, 100)
	for i := range min(n, 100) {
		sample = append(sample, i*n/min(n, 100))
	}
	var m idleFigures
	if cfg.MemProfile != "" {
		baseProfile = cfg.MemProfile + ".base"
	}
	lat, calls, err := wake(ctx, srv, n, n, sample, func() error {
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
	k := min(n, 10)
	fan, _, err := wake(ctx, srv, n, k, seq(k), nil)
	if err != nil {
		return err
	}
	slices.Sort(single)
	slices.Sort(lat)
	slices.Sort(fan)
	slices.Sort(calls)
	rep.rows = append(rep.rows, row{Name: fmt.Sprintf("long-poll waiters, %s, %d at once", srv.kind, n),
		Product: fmt.Sprintf("%.1f KiB server RSS per waiter (heap %.1f KiB, stacks %.1f KiB, %.1f goroutines), idle CPU %.1f%% of a core; "+
			"one approval among them: approval→answer p50 %s, p99 %s (the approval's own call p50 %s, p99 %s); all %d woken by %d approvals at once: p50 %s, p99 %s",
			m.rss/1024, m.heap/1024, m.stack/1024, m.goroutines, m.cpu*100, ms(pct(lat, 0.5)), ms(pct(lat, 0.99)),
			ms(pct(calls, 0.5)), ms(pct(calls, 0.99)), n, k, ms(pct(fan, 0.5)), ms(pct(fan, 0.99))),
		Baseline: fmt.Sprintf("one waiter alone: approval→answer p50 %s, p99 %s", ms(pct(single, 0.5)), ms(pct(single, 0.99))),
		Ratio:    float64(pct(lat, 0.99)) / float64(pct(single, 0.99)), RatioOf: "p99 wake-up among them vs alone",
		Ratio2: float64(pct(fan, 0.99)) / float64(pct(single, 0.99)), Ratio2Of: "all at once vs alone"})
	return nil
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// wake parks n long-polls spread over k fresh proposals (waiter i on
// proposal i % k), calls parked once they all wait, approves the proposals
// numbered in approve (one at a time, a moment apart when there are more
// than ten, so that each wake-up is measured on its own) and returns the
// time from its proposal's approval to its answer of every waiter of
// those proposals, and how long each approval call took (its commit
// included). The others are dropped.
func wake(ctx context.Context, srv *server, n, k int, approve []int, parked func() error) (lat, calls []time.Duration, err error) {
	props, err := proposeMany(ctx, srv, k)
	if err != nil {
		return nil, nil, err
	}
	spec := waiterSpec{Addr: strings.TrimPrefix(srv.base, "http://"), Key: srv.key, N: n}
	for _, p := range props {
		spec.Paths = append(spec.Paths, fmt.Sprintf("/api/v1/proposals/%s?wait=60&since=%d", p.ID, p.Revision))
	}
	if parked != nil {
		runtime.GC()
		debug.FreeOSMemory()
		var err error
		if baseRSS, err = rssBytes(); err != nil {
			return nil, nil, err
		}
		baseGoroutines = runtime.NumGoroutine()
		runtime.ReadMemStats(&baseMem)
		if baseProfile != "" {
			if err := writeHeapProfile(baseProfile); err != nil {
				return nil, nil, err
			}
		}
	}
	cl, err := startWaiterClient(ctx, spec)
	if err != nil {
		return nil, nil, err
	}
	approved := make(map[int]time.Time, len(approve))
	defer func() {
		cl.stop()
		// Where parked connections are not watched (not on Linux), a
		// client gone away is noticed only when its answer is written, at
		// the proposal's next change or the wait's deadline. The
		// proposals nobody approved are withdrawn, which answers (and
		// ends) their long-polls now wherever the bench runs.
		for j, p := range props {
			if _, ok := approved[j]; !ok {
				_, _ = srv.app.Protocol.Cancel(context.WithoutCancel(ctx), srv.agent, p.ID)
			}
		}
		for deadline := time.Now().Add(writes.MaxWait + 10*time.Second); srv.app.Protocol.Waiting() > 0 && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
	}()
	if err := cl.parked(); err != nil {
		return nil, nil, err
	}
	if err := settle(ctx, srv, n); err != nil {
		return nil, nil, err
	}
	if parked != nil {
		if err := parked(); err != nil {
			return nil, nil, err
		}
	}
	want := 0
	for _, j := range approve {
		want += n / k
		if j < n%k {
			want++
		}
	}
	answers := make(chan answer, n)
	go cl.read(answers)
	for _, j := range approve {
		if len(approve) > 10 {
			time.Sleep(20 * time.Millisecond)
		}
		approved[j] = time.Now()
		if _, err := srv.app.Protocol.Confirm(ctx, writes.ConfirmInput{Reviewer: srv.reviewer, ProposalID: props[j].ID,
			DigestSeen: props[j].ArgsDigest, EffectSeen: props[j].EffectDigest, Evidence: auth.ApprovalEvidence(srv.reviewer, nil)}); err != nil {
			return nil, nil, err
		}
		calls = append(calls, time.Since(approved[j]))
	}
	timeout := time.After(2 * time.Minute)
	for len(lat) < want {
		select {
		case a, ok := <-answers:
			if !ok {
				return nil, nil, cl.fail(fmt.Errorf("waiter client: %d of %d answers", len(lat), want))
			}
			if a.err != nil {
				return nil, nil, cl.fail(a.err)
			}
			t0, ok := approved[a.waiter%k]
			if !ok {
				return nil, nil, fmt.Errorf("waiter %d answered though its proposal was not approved", a.waiter)
			}
			lat = append(lat, a.at.Sub(t0))
		case <-timeout:
			return nil, nil, fmt.Errorf("waiter client: %d of %d answers after two minutes", len(lat), want)
		}
	}
	return lat, calls, nil
}

// proposeMany creates k proposals awaiting confirmation, on a few workers.
func proposeMany(ctx context.Context, srv *server, k int) ([]*models.Proposal, error) {
	out := make([]*models.Proposal, k)
	var (
		next atomic.Int64
		mu   sync.Mutex
		err1 error
		wg   sync.WaitGroup
	)
	for range min(k, 8) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= k {
					return
				}
				p, err := srv.propose(ctx, i)
				if err != nil {
					mu.Lock()
					err1 = err
					mu.Unlock()
					return
				}
				out[i] = p
			}
		})
	}
	wg.Wait()
	return out, err1
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
// is sent, and then, as each answer arrives, a line with the waiter's
// number and the wall-clock time of its answer's status line in Unix
// nanoseconds (the parent reads the same clock), or the waiter's number and
// what went wrong. It runs until every waiter has its answer or it is
// killed.
func waiterClient(stdin io.Reader, stdout io.Writer) error {
	var spec waiterSpec
	if err := json.NewDecoder(stdin).Decode(&spec); err != nil {
		return fmt.Errorf("reading the spec: %w", err)
	}
	if lim := fdLimit(); spec.N+64 > lim {
		return fmt.Errorf("%d waiters need more open files than the limit of %d", spec.N, lim)
	}
	var (
		wg    sync.WaitGroup
		ready sync.WaitGroup
		outMu sync.Mutex
	)
	say := func(format string, args ...any) {
		outMu.Lock()
		fmt.Fprintf(stdout, format, args...)
		outMu.Unlock()
	}
	ready.Add(spec.N)
	for i := range spec.N {
		wg.Go(func() {
			conn, err := net.Dial("tcp", spec.Addr)
			if err != nil {
				ready.Done()
				say("%d error %v\n", i, err)
				return
			}
			defer conn.Close()
			_, err = fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n",
				spec.Paths[i%len(spec.Paths)], spec.Addr, spec.Key)
			ready.Done()
			if err != nil {
				say("%d error %v\n", i, err)
				return
			}
			conn.SetReadDeadline(time.Now().Add(90 * time.Second))
			br := bufio.NewReaderSize(conn, 64)
			line, err := br.ReadString('\n')
			at := time.Now().UnixNano()
			switch {
			case err != nil:
				say("%d error %v\n", i, err)
			case !strings.HasPrefix(line, "HTTP/1.1 200"):
				say("%d error long-poll answered %q\n", i, strings.TrimSpace(line))
			default:
				say("%d %d\n", i, at)
			}
		})
	}
	ready.Wait()
	say("parked\n")
	wg.Wait()
	return nil
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
	return &clientProc{cmd: cmd, out: bufio.NewReader(out), stderr: &stderr}, nil
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

// answer is one waiter's answer as the client reported it.
type answer struct {
	waiter int
	at     time.Time
	err    error
}

// read sends each answer the client reports to out, and closes out when
// the client's output ends.
func (c *clientProc) read(out chan<- answer) {
	defer close(out)
	for {
		line, err := c.out.ReadString('\n')
		if err != nil {
			return
		}
		f := strings.SplitN(strings.TrimSpace(line), " ", 2)
		i, err := strconv.Atoi(f[0])
		if err != nil || len(f) != 2 {
			out <- answer{err: fmt.Errorf("waiter client said %q", line)}
			return
		}
		if msg, bad := strings.CutPrefix(f[1], "error "); bad {
			out <- answer{waiter: i, err: fmt.Errorf("waiter %d: %s", i, msg)}
			continue
		}
		ns, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			out <- answer{err: fmt.Errorf("waiter client said %q", line)}
			return
		}
		out <- answer{waiter: i, at: time.Unix(0, ns)}
	}
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
	cpu0 := processCPU()
	t := time.Now()
	time.Sleep(2 * time.Second)
	used := processCPU() - cpu0
	return idleFigures{rss: float64(with-baseRSS) / float64(n), goroutines: float64(g-baseGoroutines) / float64(n),
		heap:  (float64(mem.HeapInuse) - float64(baseMem.HeapInuse)) / float64(n),
		stack: (float64(mem.StackInuse) - float64(baseMem.StackInuse)) / float64(n),
		cpu:   used.Seconds() / time.Since(t).Seconds()}, nil
}

// baseRSS and baseGoroutines are the process's RSS and goroutines just
// before the waiters were started.
var (
	// baseProfile is where to write a heap profile with baseRSS, the base
	// to compare the profile with the waiters parked against (pprof -base).
	baseProfile    string
	baseRSS        int64
	baseGoroutines int
	baseMem        runtime.MemStats
)

func rssBytes() (int64, error) { return procStatus("VmRSS:") }

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
