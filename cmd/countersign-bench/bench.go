package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/countersign/countersign/static"
)

// row is one line of the report.
type row struct {
	Name      string
	Product   string  // what countersign did
	Baseline  string  // what the floor or baseline did
	Ratio     float64 // the headline ratio (see RatioOf)
	RatioOf   string  // what Ratio divides
	Ratio2    float64 // a second ratio (p99), 0 when none
	Ratio2Of  string
	Statement float64 // statements per product operation, 0 when not counted
}

type report struct {
	rows  []row
	notes []string
}

func (r *report) print(w io.Writer) {
	fmt.Fprintln(w, "| measurement | countersign | floor / baseline | ratio | p99 ratio | statements/op |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, x := range r.rows {
		r2, st := "", ""
		if x.Ratio2Of != "" {
			r2 = fmt.Sprintf("%.2f× (%s)", x.Ratio2, x.Ratio2Of)
		}
		if x.Statement > 0 {
			st = fmt.Sprintf("%.1f", x.Statement)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.2f (%s) | %s | %s |\n", x.Name, x.Product, x.Baseline, x.Ratio, x.RatioOf, r2, st)
	}
	for _, n := range r.notes {
		fmt.Fprintln(w, "\n"+n)
	}
}

// batch is the outcome of n operations at some concurrency.
type batch struct {
	wall time.Duration
	cpu  time.Duration // the bench process's CPU time (user and system) over the batch
	lat  []time.Duration
}

func (b batch) opsPerSec() float64 { return float64(len(b.lat)) / b.wall.Seconds() }

// runBatch runs op(i) for i in [0,n) on c workers and times each.
func runBatch(ctx context.Context, n, c int, op func(ctx context.Context, i int) error) (batch, error) {
	lat := make([]time.Duration, n)
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		err1 error
	)
	cpu0 := processCPU()
	start := time.Now()
	for range c {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t := time.Now()
				err := op(ctx, i)
				lat[i] = time.Since(t)
				if err != nil {
					mu.Lock()
					if err1 == nil {
						err1 = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return batch{wall: time.Since(start), cpu: processCPU() - cpu0, lat: lat}, err1
}

// summary is the medians over rounds of throughput, and percentiles over
// every latency of every round.
type summary struct {
	ops      float64
	p50, p99 time.Duration
	cpu      time.Duration // median CPU time of the bench's process per operation
}

func summarize(bs []batch) summary {
	var ops []float64
	var lat, cpu []time.Duration
	for _, b := range bs {
		ops = append(ops, b.opsPerSec())
		lat = append(lat, b.lat...)
		cpu = append(cpu, b.cpu/time.Duration(max(len(b.lat), 1)))
	}
	sort.Float64s(ops)
	slices.Sort(lat)
	slices.Sort(cpu)
	return summary{ops: ops[len(ops)/2], p50: pct(lat, 0.50), p99: pct(lat, 0.99), cpu: cpu[len(cpu)/2]}
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(d)))) - 1
	return d[max(i, 0)]
}

func (s summary) String() string {
	return fmt.Sprintf("%.0f ops/s, p50 %s, p99 %s", s.ops, ms(s.p50), ms(s.p99))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

// bench runs every measurement and returns the report.
func bench(ctx context.Context, cfg config) (*report, error) {
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "countersign-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	rep := &report{}
	var kinds []string
	if !cfg.SkipSQLite {
		kinds = append(kinds, "sqlite")
	}
	if cfg.PG != "" {
		kinds = append(kinds, "postgres")
	}
	for _, kind := range kinds {
		if err := benchKind(ctx, cfg, dir, kind, rep); err != nil {
			return nil, fmt.Errorf("%s: %w", kind, err)
		}
	}
	if cfg.SignIns {
		if err := benchSignIns(rep); err != nil {
			return nil, fmt.Errorf("sign-ins: %w", err)
		}
	}
	return rep, nil
}

func openDB(ctx context.Context, cfg config, dir, kind, name string) (*database, error) {
	if kind == "sqlite" {
		return openSQLite(dir, name)
	}
	return openPostgres(ctx, cfg.PG)
}

func benchKind(ctx context.Context, cfg config, dir, kind string, rep *report) error {
	db, err := openDB(ctx, cfg, dir, kind, "writes")
	if err != nil {
		return err
	}
	defer db.drop()
	srv, err := startServer(ctx, kind, db.url)
	if err != nil {
		return err
	}
	defer srv.stop()
	if kind == "postgres" {
		srv.wal = &walMeter{db: db.raw}
	}
	fl, err := newFloor(ctx, db.floor, kind == "postgres")
	if err != nil {
		return err
	}
	if err := benchExecute(ctx, cfg, srv, fl, rep); err != nil {
		return fmt.Errorf("execute: %w", err)
	}
	if err := benchCreate(ctx, cfg, srv, fl, rep); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	srv.stop()
	srv.stop = func() {}

	// Two histories side by side, 1,000 and cfg.ListN stored, so that
	// each list is timed on both in turn.
	var hist [2]*server
	for i, name := range []string{"history-1k", "history"} {
		hdb, err := openDB(ctx, cfg, dir, kind, name)
		if err != nil {
			return err
		}
		defer hdb.drop()
		hsrv, err := startServer(ctx, kind, hdb.url)
		if err != nil {
			return err
		}
		defer hsrv.stop()
		hsrv.raw = hdb.raw
		hist[i] = hsrv
	}
	lsrv := hist[1]
	if err := benchList(ctx, cfg, hist[0], lsrv, rep); err != nil {
		return fmt.Errorf("list: %w", err)
	}
	if err := benchReadStall(ctx, cfg, lsrv, rep); err != nil {
		return fmt.Errorf("reads and writes: %w", err)
	}
	if cfg.Waiters > 0 {
		if err := benchWaiters(ctx, cfg, lsrv, rep); err != nil {
			return fmt.Errorf("waiters: %w", err)
		}
	}
	return nil
}

// benchExecute interleaves floor and product batches of executes at each
// concurrency, alternating which goes first.
func benchExecute(ctx context.Context, cfg config, srv *server, fl *floor, rep *report) error {
	bare := newBareHTTP(srv)
	for _, c := range cfg.Conc {
		var prod, base []batch
		var stmts, ops int64
		var walProd, walBase float64
		for r := range cfg.Rounds {
			toks, err := fl.tokens(ctx, cfg.Ops)
			if err != nil {
				return err
			}
			work, err := srv.confirmed(ctx, cfg.Ops)
			if err != nil {
				return err
			}
			floorRun := srv.wal.around(ctx, &walBase, func() error {
				b, err := runBatch(ctx, cfg.Ops, c, func(ctx context.Context, i int) error { return fl.execute(ctx, toks[i]) })
				base = append(base, b)
				return err
			})
			prodRun := srv.wal.around(ctx, &walProd, func() error {
				before := srv.stmts.Load()
				b, err := runBatch(ctx, cfg.Ops, c, func(ctx context.Context, i int) error {
					body := fmt.Appendf(nil, `{"proposal_id":%q,"token":%q}`, work[i][0], work[i][1])
					return srv.do(ctx, "POST", "/api/v1/executions", body, 200)
				})
				stmts += srv.stmts.Load() - before
				ops += int64(cfg.Ops)
				prod = append(prod, b)
				return err
			})
			if err := alternate(r, floorRun, bare.run(ctx, cfg.Ops, c), prodRun); err != nil {
				return err
			}
		}
		p, f := summarize(prod), summarize(base)
		rep.rows = append(rep.rows, row{Name: fmt.Sprintf("execute, %s, c=%d", srv.kind, c),
			Product: p.String(), Baseline: f.String(),
			Ratio: p.ops / f.ops, RatioOf: "throughput vs floor",
			Ratio2: float64(p.p99) / float64(f.p99), Ratio2Of: "vs floor",
			Statement: float64(stmts) / float64(ops)},
			bare.row("execute", srv.kind, c, p, f))
		rep.notes = append(rep.notes, costNote("execute", srv, c, p, f, summarize(bare.batches), walProd, walBase, cfg.Ops*cfg.Rounds))
		bare.reset()
	}
	return nil
}

// benchCreate interleaves creates through the API with the create floor.
func benchCreate(ctx context.Context, cfg config, srv *server, fl *floor, rep *report) error {
	var seq atomic.Int64
	body := func() []byte {
		return fmt.Appendf(nil, `{"tool":"send_customer_email","arguments":%s}`, emailArgs(int(seq.Add(1))))
	}
	bare := newBareHTTP(srv)
	for _, c := range cfg.Conc {
		var prod, base []batch
		var stmts, ops int64
		var walProd, walBase float64
		for r := range cfg.Rounds {
			floorRun := srv.wal.around(ctx, &walBase, func() error {
				b, err := runBatch(ctx, cfg.Ops, c, func(ctx context.Context, i int) error { return fl.create(ctx, body()) })
				base = append(base, b)
				return err
			})
			prodRun := srv.wal.around(ctx, &walProd, func() error {
				before := srv.stmts.Load()
				b, err := runBatch(ctx, cfg.Ops, c, func(ctx context.Context, i int) error {
					return srv.do(ctx, "POST", "/api/v1/proposals", body(), 201)
				})
				stmts += srv.stmts.Load() - before
				ops += int64(cfg.Ops)
				prod = append(prod, b)
				return err
			})
			if err := alternate(r, floorRun, bare.run(ctx, cfg.Ops, c), prodRun); err != nil {
				return err
			}
		}
		p, f := summarize(prod), summarize(base)
		rep.rows = append(rep.rows, row{Name: fmt.Sprintf("create, %s, c=%d", srv.kind, c),
			Product: p.String(), Baseline: f.String(),
			Ratio: p.ops / f.ops, RatioOf: "throughput vs floor",
			Ratio2: float64(p.p99) / float64(f.p99), Ratio2Of: "vs floor",
			Statement: float64(stmts) / float64(ops)},
			bare.row("create", srv.kind, c, p, f))
		rep.notes = append(rep.notes, costNote("create", srv, c, p, f, summarize(bare.batches), walProd, walBase, cfg.Ops*cfg.Rounds))
		bare.reset()
	}
	return nil
}

// alternate runs the floor's batch, then the bare HTTP batch, then the
// product's in even rounds, and the other way round in odd ones, so that
// the machine's drift falls on all three alike.
func alternate(round int, floorRun, bareRun, prodRun func() error) error {
	order := []func() error{floorRun, bareRun, prodRun}
	if round%2 == 1 {
		slices.Reverse(order)
	}
	for _, run := range order {
		if err := run(); err != nil {
			return err
		}
	}
	return nil
}

// bareHTTP measures a request that does no work of countersign's: a GET
// of one of the console's static files (7 KB, from memory) through the
// same server, middleware and client as the product's requests. The
// floor does its work without HTTP; this is what HTTP alone costs on the
// machine, so that the report can say how near the floor anything served
// over HTTP could come.
type bareHTTP struct {
	srv     *server
	path    string
	batches []batch
}

func newBareHTTP(srv *server) *bareHTTP {
	return &bareHTTP{srv: srv, path: static.New().URL("js/app.js")}
}

func (h *bareHTTP) run(ctx context.Context, n, c int) func() error {
	return func() error {
		b, err := runBatch(ctx, n, c, func(ctx context.Context, _ int) error { return h.srv.do(ctx, "GET", h.path, nil, 200) })
		h.batches = append(h.batches, b)
		return err
	}
}

func (h *bareHTTP) reset() { h.batches = nil }

// row reports the bare request beside the floor of op. Where the floor's
// work and HTTP's each take the whole machine (or, at c = 1, follow one
// another) their costs add up: a server that did nothing beyond the floor
// would reach 1 / (1/floor + 1/bare) operations a second through HTTP.
// The row's ratio is that estimate over the floor, the best any server
// could report in the row above; its second is the product's throughput
// over that estimate.
func (h *bareHTTP) row(op, kind string, c int, product, floor summary) row {
	b := summarize(h.batches)
	best := 1 / (1/floor.ops + 1/b.ops)
	return row{Name: fmt.Sprintf("%s floor through HTTP, %s, c=%d", op, kind, c),
		Product: "HTTP alone: " + b.String(), Baseline: floor.String(),
		Ratio: best / floor.ops, RatioOf: "the floor with HTTP's cost added, vs floor",
		Ratio2: product.ops / best, Ratio2Of: "countersign vs the floor with HTTP's cost"}
}
