package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/writes"
)

// config is what a run measures.
type config struct {
	PG         string
	Dir        string
	Conc       []int
	Ops        int
	Rounds     int
	ListN      int
	Waiters    int
	SkipSQLite bool
	MemProfile string // heap profile while the waiters are parked
	SignIns    bool   // measure the memory of concurrent sign-ins
	Log        io.Writer
}

// server is one countersign application serving HTTP on loopback over a
// fresh database, with the demo tenant, its reviewer and an agent.
type server struct {
	kind     string // "sqlite" or "postgres"
	app      *app.App
	base     string
	key      string
	agent    models.Agent
	reviewer models.User
	client   *http.Client
	stmts    atomic.Int64
	raw      *sql.DB   // countersign's database, for bulk loads
	wal      *walMeter // the server's write-ahead log; nil on SQLite
	stop     func()
}

func startServer(ctx context.Context, kind, dbURL string) (*server, error) {
	s := &server{kind: kind}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.base = "http://" + ln.Addr().String()
	a, err := app.Open(ctx, app.Config{DB: dbURL, Addr: ln.Addr().String(), BaseURL: s.base,
		Logger: slog.New(slog.DiscardHandler), OnStatement: func(string) { s.stmts.Add(1) },
		// The cheapest hash the password rules accept: the reviewer never
		// signs in, the measurement is about the API.
		PasswordHash: secret.PasswordParams{Time: 1, MemoryKiB: 8 * 1024, Threads: 1}})
	if err != nil {
		ln.Close()
		return nil, err
	}
	s.app = a
	key, kh, err := secret.NewAPIKey()
	if err != nil {
		a.Close()
		ln.Close()
		return nil, err
	}
	rh, err := a.Passwords.Hash("bench-reviewer-password")
	if err != nil {
		a.Close()
		ln.Close()
		return nil, err
	}
	seeded, err := a.SeedDemoWith(ctx, store.DemoSeed{ReviewerName: "alice", ReviewerPasswordHash: rh,
		AdminName: "admin", AdminPasswordHash: rh, AgentName: "bench-agent", AgentKeyHash: kh})
	if err != nil {
		a.Close()
		ln.Close()
		return nil, err
	}
	s.key, s.agent, s.reviewer = key, seeded.Agent, seeded.Reviewer
	sctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { a.Serve(sctx, ln, 5*time.Second) })
	s.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}}
	s.stop = func() {
		cancel()
		wg.Wait()
		a.Close()
	}
	return s, nil
}

// emailArgs are the arguments of one send_customer_email proposal. The
// demo ledger's customer version does not move when an e-mail is queued,
// so any number of them stay executable.
func emailArgs(i int) []byte {
	return fmt.Appendf(nil, `{"customer_id":"cus_001","template":"apology","subject":"Sorry","body":"Message %d","send_at":null}`, i)
}

// confirmed proposes and confirms n proposals (not measured) and returns
// their ids and tokens.
func (s *server) confirmed(ctx context.Context, n int) ([][2]string, error) {
	out := make([][2]string, n)
	var (
		next atomic.Int64
		mu   sync.Mutex
		err1 error
		wg   sync.WaitGroup
	)
	for range 4 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				p, err := s.propose(ctx, i)
				if err == nil {
					p, err = s.app.Protocol.Confirm(ctx, writes.ConfirmInput{Reviewer: s.reviewer, ProposalID: p.ID,
						DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(s.reviewer, nil)})
				}
				if err == nil && p.Token == nil {
					err = fmt.Errorf("proposal %s confirmed without a token", p.ID)
				}
				if err != nil {
					mu.Lock()
					err1 = err
					mu.Unlock()
					return
				}
				out[i] = [2]string{p.ID, p.Token.Compact}
			}
		})
	}
	wg.Wait()
	return out, err1
}

var proposeSeq atomic.Int64

func (s *server) propose(ctx context.Context, _ int) (*models.Proposal, error) {
	i := int(proposeSeq.Add(1))
	p, _, err := s.app.Protocol.Propose(ctx, s.agent, writes.ProposeInput{Tool: "send_customer_email", Arguments: emailArgs(i)})
	return p, err
}

// do sends one API request and fails unless the status is one of want.
func (s *server) do(ctx context.Context, method, path string, body []byte, want ...int) error {
	var r io.Reader
	if body != nil {
		r = strings.NewReader(string(body))
	}
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, w := range want {
		if resp.StatusCode == w {
			return nil
		}
	}
	return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
}

// databases yields the fresh databases of a run: a SQLite file in dir and,
// given a PostgreSQL DSN, a database created on that server. Each comes
// with the URL countersign opens and the floor's connection.
type database struct {
	kind  string
	url   string // countersign's database
	raw   *sql.DB
	floor *sql.DB
	drop  func()
}

func openSQLite(dir, name string) (*database, error) {
	path := filepath.Join(dir, name+".db")
	floorPath := filepath.Join(dir, name+"-floor.db")
	// The floor uses the same pragmas as the store's writer, and as the
	// store one connection: SQLite has one writer.
	fdb, err := sql.Open("sqlite", store.SQLiteDSN(floorPath))
	if err != nil {
		return nil, err
	}
	fdb.SetMaxOpenConns(1)
	raw, err := sql.Open("sqlite", store.SQLiteDSN(path))
	if err != nil {
		return nil, err
	}
	raw.SetMaxOpenConns(1)
	return &database{kind: "sqlite", url: "sqlite://" + path, raw: raw, floor: fdb, drop: func() {
		fdb.Close()
		raw.Close()
		for _, p := range []string{path, floorPath} {
			for _, suf := range []string{"", "-wal", "-shm"} {
				os.Remove(p + suf)
			}
		}
	}}, nil
}

func openPostgres(ctx context.Context, dsn string) (*database, error) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, fmt.Errorf("--pg must be a postgres:// URL")
	}
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	var b [6]byte
	rand.Read(b[:])
	name := "countersign_bench_" + hex.EncodeToString(b[:])
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close()
		return nil, fmt.Errorf("creating a fresh database: %w", err)
	}
	u.Path = "/" + name
	fresh := u.String()
	fdb, err := sql.Open("pgx", fresh)
	if err != nil {
		admin.Close()
		return nil, err
	}
	// The same pool bounds as the store's.
	fdb.SetMaxOpenConns(20)
	fdb.SetMaxIdleConns(10)
	return &database{kind: "postgres", url: fresh, raw: fdb, floor: fdb, drop: func() {
		fdb.Close()
		admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		admin.Close()
	}}, nil
}
