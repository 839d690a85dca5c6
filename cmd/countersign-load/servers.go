package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/countersign/countersign/internal/app"
)

// secretEnv names the variable that carries the business system's HMAC
// secret to the servers (the registry's secret_env).
const secretEnv = "COUNTERSIGN_LOAD_BIZ_SECRET"

// registryYAML is the demo registry with refund_order executed by the
// reference business system at bizURL.
func registryYAML(base []byte, bizURL string, timeout time.Duration) string {
	return strings.Replace(string(base), "adapter: {kind: demo_ledger}",
		fmt.Sprintf("adapter: {kind: http, base_url: %s, secret_env: %s, timeout: %s}", bizURL, secretEnv, timeout), 1)
}

// cluster is a set of countersign servers over one database.
type cluster interface {
	// URL returns the base URL of server i.
	URL(i int) string
	// Size is the number of servers.
	Size() int
	// Kills reports how many servers were killed so far.
	Kills() int
	// Stop ends every server.
	Stop()
}

// inProcess runs the servers as applications inside this process: no
// kills, quick to start (the short test uses it).
type inProcess struct {
	urls   []string
	cancel context.CancelFunc
	wg     sync.WaitGroup
	apps   []*app.App
}

func startInProcess(ctx context.Context, n int, db, tools string, getenv func(string) string) (*inProcess, error) {
	ctx, cancel := context.WithCancel(ctx)
	c := &inProcess{cancel: cancel}
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			c.Stop()
			return nil, err
		}
		base := "http://" + ln.Addr().String()
		a, err := app.Open(ctx, app.Config{DB: db, ToolsFile: tools, Addr: ln.Addr().String(), BaseURL: base,
			Getenv: getenv, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			ln.Close()
			c.Stop()
			return nil, err
		}
		c.apps = append(c.apps, a)
		c.urls = append(c.urls, base)
		c.wg.Go(func() { a.Serve(ctx, ln, 500*time.Millisecond) })
	}
	return c, nil
}

func (c *inProcess) URL(i int) string { return c.urls[i] }
func (c *inProcess) Size() int        { return len(c.urls) }
func (c *inProcess) Kills() int       { return 0 }
func (c *inProcess) Stop() {
	c.cancel()
	c.wg.Wait()
	for _, a := range c.apps {
		a.Close()
	}
}

// children runs `countersign serve` processes on fixed loopback ports and,
// when killing, SIGKILLs one at random every so often and starts it again.
type children struct {
	bin, db, tools string
	env            []string
	log            io.Writer

	mu    sync.Mutex
	addrs []string
	procs []*exec.Cmd
	kills atomic.Int64

	stop chan struct{}
	wg   sync.WaitGroup
}

func startChildren(ctx context.Context, n int, bin, db, tools string, env []string, log io.Writer) (*children, error) {
	c := &children{bin: bin, db: db, tools: tools, env: env, log: log, stop: make(chan struct{})}
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		c.addrs = append(c.addrs, ln.Addr().String())
		ln.Close()
	}
	c.procs = make([]*exec.Cmd, n)
	for i := range n {
		if err := c.start(ctx, i); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// start launches server i and waits until it prints that it serves.
func (c *children) start(ctx context.Context, i int) error {
	cmd := exec.Command(c.bin, "serve", "--db", c.db, "--tools", c.tools, "--addr", c.addrs[i], "--log-level", "error")
	cmd.Env = c.env
	cmd.Stderr = c.log
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", c.bin, err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		said := false
		for sc.Scan() {
			if !said && strings.Contains(sc.Text(), "serving on") {
				said = true
				ready <- true
			}
		}
		if !said {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			cmd.Process.Kill()
			cmd.Wait()
			return fmt.Errorf("server %d on %s exited before serving", i, c.addrs[i])
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("server %d on %s did not start within 60s", i, c.addrs[i])
	case <-ctx.Done():
		cmd.Process.Kill()
		cmd.Wait()
		return ctx.Err()
	}
	c.mu.Lock()
	c.procs[i] = cmd
	c.mu.Unlock()
	return nil
}

// killLoop SIGKILLs a random server every interval (±50%) and restarts it
// after a short pause, until Stop. Failures to restart are retried.
func (c *children) killLoop(ctx context.Context, every time.Duration, seed uint64) {
	rnd := rand.New(rand.NewPCG(seed, 0xdead))
	c.wg.Go(func() {
		for {
			wait := every/2 + time.Duration(rnd.Int64N(int64(every)))
			select {
			case <-c.stop:
				return
			case <-time.After(wait):
			}
			i := rnd.IntN(len(c.addrs))
			c.mu.Lock()
			cmd := c.procs[i]
			c.procs[i] = nil
			c.mu.Unlock()
			if cmd == nil {
				continue
			}
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			c.kills.Add(1)
			for try := 0; try < 20; try++ {
				select {
				case <-c.stop:
					return
				case <-time.After(time.Duration(100+rnd.IntN(500)) * time.Millisecond):
				}
				if err := c.start(ctx, i); err == nil {
					break
				} else {
					fmt.Fprintf(c.log, "restart of server %d failed: %v\n", i, err)
				}
			}
		}
	})
}

func (c *children) URL(i int) string { return "http://" + c.addrs[i] }
func (c *children) Size() int        { return len(c.addrs) }
func (c *children) Kills() int       { return int(c.kills.Load()) }

// Stop ends the kill loop and every server (SIGTERM, then SIGKILL after 10s).
func (c *children) Stop() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	c.wg.Wait()
	c.mu.Lock()
	procs := append([]*exec.Cmd(nil), c.procs...)
	c.mu.Unlock()
	for _, cmd := range procs {
		if cmd == nil {
			continue
		}
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
}

// buildServer compiles countersign into dir and returns the binary's path.
func buildServer(ctx context.Context, dir string, log io.Writer) (string, error) {
	bin := dir + "/countersign"
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/countersign/countersign/cmd/countersign")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building countersign (give --bin to use a built one): %w", err)
	}
	return bin, nil
}

var errBudget = errors.New("gave up: the retry budget ran out")

func environ(extra ...string) []string { return append(os.Environ(), extra...) }
