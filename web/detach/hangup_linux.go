package detach

import (
	"errors"
	"net"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// hangups is the process's watcher, started on first use.
var hangups struct {
	once sync.Once
	w    *watcher // nil when it could not start
}

// watcher waits, on a goroutine of its own, for any of its connections to
// become readable or hung up. Each watch is one-shot: it fires at most once
// and is then looked at (watcher.look) and either ends or is armed again.
type watcher struct {
	epfd int
	mu   sync.Mutex
	next uint64
	// watches by token, the epoll event's 64 bits of data: a token is never
	// reused, so an event of a watch that ended (its descriptor number
	// perhaps reused since) finds nothing.
	watches map[uint64]watch
}

type watch struct {
	rc   syscall.RawConn
	gone func()
}

func watchHangup(conn net.Conn, gone func()) func() {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return func() {}
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return func() {}
	}
	hangups.once.Do(func() { hangups.w = startWatcher() })
	w := hangups.w
	if w == nil {
		return func() {}
	}
	w.mu.Lock()
	w.next++
	token := w.next
	w.watches[token] = watch{rc: rc, gone: gone}
	w.mu.Unlock()
	var added error
	if err := rc.Control(func(fd uintptr) { added = w.arm(int(fd), token, unix.EPOLL_CTL_ADD) }); err != nil || added != nil {
		w.forget(token)
		return func() {}
	}
	return func() {
		if w.forget(token) {
			// Closing the descriptor would remove it from the epoll set too,
			// but only once every copy of it is closed.
			_ = rc.Control(func(fd uintptr) { _ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, int(fd), nil) })
		}
	}
}

func startWatcher() *watcher {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil
	}
	w := &watcher{epfd: epfd, watches: map[uint64]watch{}}
	go w.run()
	return w
}

// arm adds or re-arms the one-shot watch of fd under token.
func (w *watcher) arm(fd int, token uint64, op int) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT,
		Fd: int32(uint32(token)), Pad: int32(uint32(token >> 32))}
	return unix.EpollCtl(w.epfd, op, fd, &ev)
}

// forget ends the watch of token; it reports whether it was still on.
func (w *watcher) forget(token uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.watches[token]
	delete(w.watches, token)
	return ok
}

func (w *watcher) run() {
	events := make([]unix.EpollEvent, 128)
	for {
		n, err := unix.EpollWait(w.epfd, events, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return // cannot happen with a valid descriptor; watches then do nothing
		}
		for _, ev := range events[:n] {
			w.look(uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32)
		}
	}
}

// look decides what a watch that fired saw: the peer's end of the stream
// (or a reset) calls gone; data ends the watch; nothing (the answer came
// and went meanwhile, or a spurious wake-up) re-arms it.
func (w *watcher) look(token uint64) {
	w.mu.Lock()
	wt, ok := w.watches[token]
	w.mu.Unlock()
	if !ok {
		return
	}
	var hungUp, rearm bool
	err := wt.rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case err == nil && n == 0:
			hungUp = true
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
			rearm = w.arm(int(fd), token, unix.EPOLL_CTL_MOD) == nil
		case err != nil:
			hungUp = true // reset, or another error: nobody will read an answer
		}
	})
	if err != nil || rearm {
		return // closed meanwhile (stop ran), or waiting again
	}
	if w.forget(token) && hungUp {
		wt.gone()
	}
}
