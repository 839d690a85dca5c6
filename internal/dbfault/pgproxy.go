package dbfault

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
)

// PGProxy is a TCP proxy in front of a PostgreSQL server that follows the
// wire protocol of each connection and, when armed, cuts a connection at
// the COMMIT of a transaction whose writes match: AfterCommit forwards the
// COMMIT, lets the server finish it (up to ReadyForQuery) and then closes
// both sides without passing the answer on — the client saw its connection
// drop although the transaction committed; BeforeCommit closes both sides
// without forwarding it — the server rolls back. This is what a database
// restart or a network cut at the wrong moment does, on a real connection.
//
// It understands the simple and the extended query protocol (statements
// prepared by name and bound later, as pgx does) and needs sslmode=disable.
type PGProxy struct {
	ln     net.Listener
	target string
	faults Injector

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewPGProxy listens on a free loopback port and forwards to target
// (host:port).
func NewPGProxy(target string) (*PGProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &PGProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the address clients connect to instead of target.
func (p *PGProxy) Addr() string { return p.ln.Addr().String() }

// Arm cuts the next connection whose transaction has a write statement
// starting with prefix, at its COMMIT, in mode (see Injector.Arm).
func (p *PGProxy) Arm(mode Mode, prefix string) { p.faults.Arm(mode, prefix) }

// Fired reports how many connections were cut.
func (p *PGProxy) Fired() int { return p.faults.Fired() }

// Close stops listening and closes every connection.
func (p *PGProxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *PGProxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *PGProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.track(client, true)
		p.track(server, true)
		s := &pgSession{p: p, client: client, server: server, prepared: map[string]string{}}
		p.wg.Go(s.upstream)
		p.wg.Go(s.downstream)
	}
}

// pgSession is one proxied connection.
type pgSession struct {
	p              *PGProxy
	client, server net.Conn

	mu       sync.Mutex
	prepared map[string]string // statement name → SQL
	writes   []string          // normalized write statements of the open transaction
	swallow  bool              // AfterCommit: drop the server's answers, cut at ReadyForQuery
	once     sync.Once
}

func (s *pgSession) cut() {
	s.once.Do(func() {
		s.client.Close()
		s.server.Close()
		s.p.track(s.client, false)
		s.p.track(s.server, false)
	})
}

// upstream forwards client messages, watching statements and COMMIT.
func (s *pgSession) upstream() {
	defer s.cut()
	r := bufio.NewReader(s.client)
	// The startup message has no type byte.
	var n uint32
	if err := binary.Read(r, binary.BigEndian, &n); err != nil || n < 4 || n > 1<<16 {
		return
	}
	startup := make([]byte, n)
	binary.BigEndian.PutUint32(startup, n)
	if _, err := io.ReadFull(r, startup[4:]); err != nil {
		return
	}
	if _, err := s.server.Write(startup); err != nil {
		return
	}
	for {
		typ, msg, err := readMessage(r)
		if err != nil {
			return
		}
		if sql, ok := s.statement(typ, msg); ok {
			q := normalizeSQL(sql)
			switch {
			case q == "commit " || q == "end ":
				mode, armed := s.p.faults.take(s.takeWrites())
				if armed && mode == BeforeCommit {
					return // cut: the server never sees the COMMIT and rolls back
				}
				if armed {
					s.mu.Lock()
					s.swallow = true
					s.mu.Unlock()
				}
			case q == "rollback " || strings.HasPrefix(q, "begin ") || strings.HasPrefix(q, "start transaction "):
				s.takeWrites() // statements outside a transaction are not its writes
			case isWrite(q):
				s.mu.Lock()
				s.writes = append(s.writes, q)
				s.mu.Unlock()
			}
		}
		if _, err := s.server.Write(msg); err != nil {
			return
		}
	}
}

func (s *pgSession) takeWrites() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.writes
	s.writes = nil
	return w
}

// statement returns the SQL a client message runs: a simple query, a
// Parse (remembered by name), or a Bind of a statement parsed before.
func (s *pgSession) statement(typ byte, msg []byte) (string, bool) {
	body := msg[5:]
	switch typ {
	case 'Q':
		return cstring(body), true
	case 'P':
		name := cstring(body)
		sql := cstring(body[len(name)+1:])
		s.mu.Lock()
		s.prepared[name] = sql
		s.mu.Unlock()
		return "", false // counted when bound
	case 'B':
		portal := cstring(body)
		name := cstring(body[len(portal)+1:])
		s.mu.Lock()
		sql, ok := s.prepared[name]
		s.mu.Unlock()
		return sql, ok
	}
	return "", false
}

// downstream forwards server messages, or swallows them after an armed
// COMMIT and cuts at the ReadyForQuery that ends it.
func (s *pgSession) downstream() {
	defer s.cut()
	r := bufio.NewReader(s.server)
	for {
		typ, msg, err := readMessage(r)
		if err != nil {
			return
		}
		s.mu.Lock()
		swallow := s.swallow
		s.mu.Unlock()
		if swallow {
			if typ == 'Z' {
				return // committed; the client never hears it
			}
			continue
		}
		if _, err := s.client.Write(msg); err != nil {
			return
		}
	}
}

// readMessage reads one typed message and returns its type and its bytes
// (type, length and body).
func readMessage(r *bufio.Reader) (byte, []byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(head[1:])
	if n < 4 || n > 1<<30 {
		return 0, nil, errors.New("dbfault: bad message length")
	}
	msg := make([]byte, 1+n)
	copy(msg, head[:])
	if _, err := io.ReadFull(r, msg[5:]); err != nil {
		return 0, nil, err
	}
	return head[0], msg, nil
}

func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// normalizeSQL lower-cases a statement, unquotes identifiers and collapses
// white space, with one trailing space.
func normalizeSQL(q string) string {
	q = strings.ToLower(strings.TrimSpace(q))
	q = strings.NewReplacer("`", " ", `"`, " ", "(", " ", ",", " ", ";", " ").Replace(q)
	return strings.Join(strings.Fields(q), " ") + " "
}

func isWrite(q string) bool {
	for _, verb := range []string{"insert ", "update ", "delete "} {
		if strings.HasPrefix(q, verb) {
			return true
		}
	}
	return false
}
