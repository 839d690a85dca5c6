package detach_test

import (
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/web/detach"
)

// pair is a TCP connection on loopback: the server's end and the client's.
func pair(t *testing.T, ln net.Listener) (server, client net.Conn) {
	t.Helper()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return server, client
}

// listener is a TCP listener on loopback for a test that needs connections
// to be watched: it skips where they are not.
func listener(t *testing.T) net.Listener {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("connections are watched on Linux only")
	}
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func within(t *testing.T, what string, d time.Duration, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("%s: not within %s", what, d)
}

func TestWatchHangupSeesTheClientLeave(t *testing.T) {
	ln := listener(t)

	// Many at once, each told once, the one whose client stays never.
	const n = 200
	var gone [n]atomic.Int32
	clients := make([]net.Conn, n)
	stops := make([]func(), n)
	for i := range n {
		s, c := pair(t, ln)
		clients[i] = c
		stops[i] = detach.WatchHangup(s, func() { gone[i].Add(1) })
	}
	for i := 1; i < n; i++ {
		clients[i].Close()
	}
	within(t, "every client that left to be seen", 10*time.Second, func() bool {
		for i := 1; i < n; i++ {
			if gone[i].Load() == 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(50 * time.Millisecond)
	for i := range n {
		want := int32(1)
		if i == 0 {
			want = 0
		}
		if got := gone[i].Load(); got != want {
			t.Errorf("connection %d: gone called %d times, want %d", i, got, want)
		}
		stops[i]()
	}

	// A reset is a hang-up too.
	s, c := pair(t, ln)
	var reset atomic.Int32
	stop := detach.WatchHangup(s, func() { reset.Add(1) })
	_ = c.(*net.TCPConn).SetLinger(0)
	c.Close()
	within(t, "a reset to be seen", 10*time.Second, func() bool { return reset.Load() == 1 })
	stop()
}

func TestWatchHangupEndsWithStopOrData(t *testing.T) {
	ln := listener(t)

	var calls atomic.Int32
	// Stopped, then the client leaves: not told.
	s, c := pair(t, ln)
	detach.WatchHangup(s, func() { calls.Add(1) })()
	c.Close()
	// The client sends bytes (which stay unread), then leaves: the watch
	// ended at the bytes.
	s2, c2 := pair(t, ln)
	stop := detach.WatchHangup(s2, func() { calls.Add(1) })
	if _, err := c2.Write([]byte("GET / HTTP/1.1\r\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	c2.Close()
	// A client that leaves after them is seen: the watcher is still there.
	s3, c3 := pair(t, ln)
	var third atomic.Int32
	stop3 := detach.WatchHangup(s3, func() { third.Add(1) })
	c3.Close()
	within(t, "the third client to be seen", 10*time.Second, func() bool { return third.Load() == 1 })
	// The first two left before the third: had either been watched
	// still, its call would have come by now.
	time.Sleep(50 * time.Millisecond)
	if got := calls.Load(); got != 0 {
		t.Errorf("gone called %d times for a stopped watch and one that saw data", got)
	}
	// The bytes were peeked at, not read.
	_ = s2.SetReadDeadline(time.Now().Add(time.Second))
	b := make([]byte, 64)
	if n, err := s2.Read(b); err != nil || string(b[:n]) != "GET / HTTP/1.1\r\n" {
		t.Errorf("the server's end read %q (%v) after the watch", b[:n], err)
	}
	stop()
	stop3()
	s.Close()

	// What cannot be watched is not: no call, and stop is safe.
	p1, p2 := net.Pipe()
	defer p1.Close()
	stopPipe := detach.WatchHangup(p1, func() { calls.Add(1) })
	p2.Close()
	time.Sleep(50 * time.Millisecond)
	stopPipe()
	if got := calls.Load(); got != 0 {
		t.Errorf("a pipe's end was watched: %d calls", got)
	}
}
