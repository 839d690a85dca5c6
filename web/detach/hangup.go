package detach

import "net"

// WatchHangup calls gone once the peer of conn, a connection taken over
// from net/http, closes it (or resets it) before the answer is written, as
// net/http itself ends a request's context when its client goes away while
// the handler runs. It holds no goroutine per connection: one process-wide
// watcher waits on every watched connection at once (epoll on Linux).
// Elsewhere, for connections it cannot watch (TLS) or when the watcher
// cannot start, it does nothing and a client that left is found out when
// the answer is written.
//
// The peer sending more bytes instead (a pipelined request, which a
// detached request does not serve) ends the watch without calling gone.
// stop ends the watch and must be called before conn is closed; gone may
// still run once, concurrently with or just after stop.
func WatchHangup(conn net.Conn, gone func()) (stop func()) {
	return watchHangup(conn, gone)
}
