package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/models/adapters/adaptertest"
	"github.com/countersign/countersign/models/registry"
)

// config is one load run.
type config struct {
	DB         string        // database URL; a SQLite file in a temporary directory when empty
	Servers    int           // countersign servers over the database
	Agents     int           // concurrent agents
	Proposals  int           // proposals per agent
	Reviewers  int           // concurrent reviewers in the console
	Duplicates float64       // share of proposals and executes sent twice
	BizFaults  float64       // share of business executes that get a fault
	Kill       bool          // run servers as child processes and SIGKILL them at random
	KillEvery  time.Duration // mean time between kills
	Bin        string        // countersign binary for --kill; built when empty
	Timeout    time.Duration // the whole run, settling included
	Seed       uint64
	Log        io.Writer // server logs and build output
}

// report is what a run found.
type report struct {
	Config           config
	Proposals        int // proposals created
	Approved         int // proposals the agents saw confirmed
	Succeeded        int // executions that ended succeeded
	Failed           int // executions that ended failed_terminal
	Unsettled        int // approved proposals whose execution did not settle in time
	Writes           int // writes the business system applied
	DuplicateEffects int // writes beyond the first for one proposal
	Lost             int // approved proposals whose write never happened though no failure was reported, or reported succeeded without a write
	Mismatched       int // writes applied although countersign settled the execution as failed
	DupPropose       int // duplicate proposes sent on purpose
	DupExecute       int // duplicate executes sent on purpose
	Retries          int // requests sent again after no answer or a 503
	AlreadyConsumed  int // execute answers already_consumed (the duplicates)
	Errors           map[string]int
	Kills            int
	BizSlow, BizErr  int64
	BizDrop          int64
	ProposeLatency   []time.Duration
	ExecuteLatency   []time.Duration
	SettleLatency    []time.Duration // execute sent → execution settled, as the agent saw it
	Elapsed          time.Duration
}

// orderBalance is each order's refundable balance; every proposal refunds
// refundAmount from an order of its own, so the balance counts its writes.
const (
	orderBalance = 10000
	refundAmount = 100
)

func (cfg *config) defaults() error {
	if cfg.Servers <= 0 {
		cfg.Servers = 2
	}
	if cfg.Agents <= 0 {
		cfg.Agents = 4
	}
	if cfg.Proposals <= 0 {
		cfg.Proposals = 5
	}
	if cfg.Reviewers <= 0 {
		cfg.Reviewers = 2
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Minute
	}
	if cfg.KillEvery <= 0 {
		cfg.KillEvery = 3 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.Agents*cfg.Proposals > 8000 {
		return errors.New("at most 8000 proposals per run (agents × proposals)")
	}
	if cfg.Duplicates < 0 || cfg.Duplicates > 1 || cfg.BizFaults < 0 || cfg.BizFaults > 1 {
		return errors.New("--duplicates and --biz-faults are shares between 0 and 1")
	}
	return nil
}

// load runs the configured load and reports what the business system and
// countersign recorded.
func load(ctx context.Context, cfg config) (*report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	started := time.Now()
	deadline := started.Add(cfg.Timeout)
	ctx, cancel := context.WithDeadline(ctx, deadline.Add(30*time.Second))
	defer cancel()
	dir, err := os.MkdirTemp("", "countersign-load-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if cfg.DB == "" {
		cfg.DB = "sqlite://" + filepath.Join(dir, "countersign.db")
	}

	// The reference business system, on loopback, with injected faults.
	secret := []byte(fmt.Sprintf("load-secret-%016x-%016x", rand.Uint64(), rand.Uint64()))
	biz := adaptertest.New(secret)
	total := cfg.Agents * cfg.Proposals
	for i := range total {
		biz.AddResource(orderID(i), fmt.Sprintf("Load order %d", i), orderBalance)
	}
	faults := newBizFaults(biz, cfg.BizFaults, 1500*time.Millisecond, cfg.Seed)
	bizLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	bizSrv := &http.Server{Handler: faults, ErrorLog: nil}
	go bizSrv.Serve(bizLn)
	defer bizSrv.Close()

	tools := filepath.Join(dir, "tools.yaml")
	if err := os.WriteFile(tools, []byte(registryYAML(registry.DemoYAML(), "http://"+bizLn.Addr().String(), time.Second)), 0o600); err != nil {
		return nil, err
	}
	getenv := func(k string) string {
		if k == secretEnv {
			return string(secret)
		}
		return ""
	}

	// Seed the demo tenant once: reviewer, agent key.
	seed, err := app.Open(ctx, app.Config{DB: cfg.DB, ToolsFile: tools, Getenv: getenv, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	creds, err := seed.SeedDemo(ctx)
	seed.Close()
	if err != nil {
		return nil, err
	}

	var cl cluster
	if cfg.Kill {
		bin := cfg.Bin
		if bin == "" {
			if bin, err = buildServer(ctx, dir, cfg.Log); err != nil {
				return nil, err
			}
		}
		ch, err := startChildren(ctx, cfg.Servers, bin, cfg.DB, tools, environ(secretEnv+"="+string(secret)), cfg.Log)
		if err != nil {
			return nil, err
		}
		ch.killLoop(ctx, cfg.KillEvery, cfg.Seed)
		cl = ch
	} else {
		ip, err := startInProcess(ctx, cfg.Servers, cfg.DB, tools, getenv)
		if err != nil {
			return nil, err
		}
		cl = ip
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cl.Stop()
		}
	}
	defer stop()

	rep := &report{Config: cfg, Errors: map[string]int{}}
	var mu sync.Mutex // guards rep
	note := func(f func(r *report)) { mu.Lock(); f(rep); mu.Unlock() }
	fail := func(what string) { note(func(r *report) { r.Errors[what]++ }) }

	// Reviewers approve whatever is pending until the agents are done.
	agentsDone := make(chan struct{})
	var reviewers sync.WaitGroup
	for i := range cfg.Reviewers {
		rv := newReviewer(cl, creds.Tenant, creds.Reviewer, creds.ReviewerPassword, cfg.Seed+uint64(i)*31)
		reviewers.Go(func() { review(ctx, rv, agentsDone, deadline, fail) })
	}

	var agents sync.WaitGroup
	views := make([]*proposalView, total)
	for a := range cfg.Agents {
		ac := &agentClient{cl: cl, key: creds.AgentKey, deadline: deadline,
			http: &http.Client{Timeout: 20 * time.Second}, rnd: rand.New(rand.NewPCG(cfg.Seed, uint64(a)))}
		agents.Go(func() {
			rnd := rand.New(rand.NewPCG(cfg.Seed+1, uint64(a)))
			for i := range cfg.Proposals {
				idx := a*cfg.Proposals + i
				v := runOne(ctx, ac, idx, rnd.Float64() < cfg.Duplicates, rnd.Float64() < cfg.Duplicates, note, fail)
				views[idx] = v
			}
		})
	}
	agents.Wait()
	close(agentsDone)
	reviewers.Wait()
	rep.Kills = cl.Kills()
	stop()
	rep.BizSlow, rep.BizErr, rep.BizDrop = faults.slow.Load(), faults.errors.Load(), faults.drops.Load()

	// What happened, as the business system saw it.
	for i, v := range views {
		writes := int((orderBalance - biz.Balance(orderID(i))) / refundAmount)
		rep.Writes += writes
		if writes > 1 {
			rep.DuplicateEffects += writes - 1
		}
		if v == nil || v.ID == "" {
			if writes > 0 {
				rep.Lost++ // written, but the agent never learned of the proposal
			}
			continue
		}
		rep.Proposals++
		if v.ConfirmationToken == "" && v.Execution == nil {
			continue
		}
		rep.Approved++
		status := ""
		if v.Execution != nil {
			status = v.Execution.Status
		}
		switch {
		case status == "succeeded" && writes >= 1:
			rep.Succeeded++
		case status == "succeeded":
			rep.Lost++
		case status == "failed_terminal":
			rep.Failed++
			if writes > 0 {
				rep.Mismatched++
			}
		default:
			rep.Unsettled++
			if writes == 0 {
				rep.Lost++
			}
		}
	}
	rep.Elapsed = time.Since(started)
	return rep, nil
}

func orderID(i int) string { return fmt.Sprintf("ord_%04d", 1000+i) }

// runOne is one agent's proposal: propose (maybe twice with the same
// request key), wait for the confirmation, execute (maybe twice at once,
// at different servers), wait for the outcome. It returns the last view of
// the proposal.
func runOne(ctx context.Context, ac *agentClient, idx int, dupPropose, dupExecute bool,
	note func(func(*report)), fail func(string)) *proposalView {
	var retries int
	defer func() { note(func(r *report) { r.Retries += retries }) }()
	args := map[string]any{"order_id": orderID(idx), "amount_minor": refundAmount, "currency": "CNY", "reason": "load test"}
	body := map[string]any{"tool": "refund_order", "arguments": args, "request_key": fmt.Sprintf("load-%d-%d", idx, rand.Uint32())}

	t0 := time.Now()
	a, err := ac.do(ctx, http.MethodPost, "/api/v1/proposals", body, &retries)
	if err != nil {
		fail("propose: " + errBudget.Error())
		return nil
	}
	note(func(r *report) { r.ProposeLatency = append(r.ProposeLatency, time.Since(t0)) })
	if a.status != http.StatusCreated && a.status != http.StatusOK {
		fail(fmt.Sprintf("propose: HTTP %d %s", a.status, a.code()))
		return nil
	}
	var v proposalView
	if err := json.Unmarshal(a.body, &v); err != nil || v.ID == "" {
		fail("propose: unreadable answer")
		return nil
	}
	if dupPropose {
		note(func(r *report) { r.DupPropose++ })
		again, err := ac.do(ctx, http.MethodPost, "/api/v1/proposals", body, &retries)
		var v2 proposalView
		if err != nil || again.status != http.StatusOK || json.Unmarshal(again.body, &v2) != nil || v2.ID != v.ID {
			fail("propose: a retry with the same request key did not return the same proposal")
		}
	}

	// Wait for a reviewer.
	for v.Status != "confirmed" {
		if time.Now().After(ac.deadline) {
			fail("not confirmed before the deadline")
			return &v
		}
		if v.Status != "awaiting_confirmation" && v.Status != "proposed" {
			fail("ended " + v.Status + " before confirmation")
			return &v
		}
		g, err := ac.do(ctx, http.MethodGet, fmt.Sprintf("/api/v1/proposals/%s?wait=5&since=%d", v.ID, v.Revision), nil, &retries)
		if err != nil {
			fail("get: " + errBudget.Error())
			return &v
		}
		if g.status == http.StatusOK {
			json.Unmarshal(g.body, &v)
		}
	}
	token := v.ConfirmationToken

	// Execute, perhaps twice at once.
	t1 := time.Now()
	n := 1
	if dupExecute {
		n = 2
		note(func(r *report) { r.DupExecute++ })
	}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			var retries int
			ex, err := ac.do(ctx, http.MethodPost, "/api/v1/executions", map[string]string{"proposal_id": v.ID, "token": token}, &retries)
			note(func(r *report) { r.Retries += retries })
			switch {
			case err != nil:
				fail("execute: " + errBudget.Error())
			case ex.status == http.StatusOK || ex.status == http.StatusAccepted:
				note(func(r *report) { r.ExecuteLatency = append(r.ExecuteLatency, time.Since(t1)) })
			case ex.code() == "already_consumed":
				note(func(r *report) { r.AlreadyConsumed++ })
			default:
				fail(fmt.Sprintf("execute: HTTP %d %s", ex.status, ex.code()))
			}
		})
	}
	wg.Wait()

	// Wait for the outcome (the reconcilers settle unknown ones).
	for {
		g, err := ac.do(ctx, http.MethodGet, fmt.Sprintf("/api/v1/proposals/%s?wait=5&since=%d", v.ID, v.Revision), nil, &retries)
		if err != nil {
			fail("get: " + errBudget.Error())
			break
		}
		if g.status == http.StatusOK {
			json.Unmarshal(g.body, &v)
		}
		if v.Execution != nil && (v.Execution.Status == "succeeded" || v.Execution.Status == "failed_terminal") {
			note(func(r *report) { r.SettleLatency = append(r.SettleLatency, time.Since(t1)) })
			break
		}
		if time.Now().After(ac.deadline) {
			break
		}
	}
	v.ConfirmationToken = token
	return &v
}

// review signs in and approves pending proposals until done is closed.
func review(ctx context.Context, rv *reviewerClient, done <-chan struct{}, deadline time.Time, fail func(string)) {
	signedIn := false
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		default:
		}
		if !signedIn {
			if err := rv.login(ctx); err != nil {
				pause(done, 200*time.Millisecond) // a server restarting
				continue
			}
			signedIn = true
		}
		ids, out, err := rv.pending(ctx)
		if out {
			signedIn = false
			continue
		}
		if err != nil || len(ids) == 0 {
			pause(done, 50*time.Millisecond)
			continue
		}
		rv.rnd.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		for _, id := range ids {
			if _, err := rv.approve(ctx, id); err != nil && !isTransport(err) {
				fail("approve: " + err.Error())
			}
		}
	}
}

func pause(done <-chan struct{}, d time.Duration) {
	select {
	case <-done:
	case <-time.After(d):
	}
}

// isTransport reports an error of the connection (a killed server), not an
// answer.
func isTransport(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "connection refused") ||
		strings.Contains(err.Error(), "HTTP 503") || strings.Contains(err.Error(), "HTTP 500")
}

// percentile returns the p-th percentile (0..100) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}

// print writes the summary.
func (r *report) print(w io.Writer) {
	c := r.Config
	mode := "in-process"
	if c.Kill {
		mode = fmt.Sprintf("child processes, SIGKILL every ~%s", c.KillEvery)
	}
	dbKind := "sqlite"
	if strings.HasPrefix(c.DB, "postgres") {
		dbKind = "postgres"
	}
	fmt.Fprintf(w, "countersign-load: %d servers (%s) over %s; %d agents × %d proposals; %d reviewers; duplicates %.0f%%; business faults %.0f%%\n",
		c.Servers, mode, dbKind, c.Agents, c.Proposals, c.Reviewers, c.Duplicates*100, c.BizFaults*100)
	fmt.Fprintf(w, "  proposals %d, approved %d, succeeded %d, failed %d, unsettled %d\n",
		r.Proposals, r.Approved, r.Succeeded, r.Failed, r.Unsettled)
	fmt.Fprintf(w, "  business writes %d, duplicate effects %d, lost %d, mismatched %d\n",
		r.Writes, r.DuplicateEffects, r.Lost, r.Mismatched)
	fmt.Fprintf(w, "  injected: %d duplicate proposes, %d duplicate executes (%d answered already_consumed), %d retries after no answer or 503\n",
		r.DupPropose, r.DupExecute, r.AlreadyConsumed, r.Retries)
	fmt.Fprintf(w, "  faults: %d server kills; business system %d slow, %d HTTP 500, %d dropped after commit\n",
		r.Kills, r.BizSlow, r.BizErr, r.BizDrop)
	fmt.Fprintf(w, "  latency: propose p50 %s p99 %s; execute p50 %s p99 %s; execute→settled p50 %s p99 %s\n",
		ms(percentile(r.ProposeLatency, 50)), ms(percentile(r.ProposeLatency, 99)),
		ms(percentile(r.ExecuteLatency, 50)), ms(percentile(r.ExecuteLatency, 99)),
		ms(percentile(r.SettleLatency, 50)), ms(percentile(r.SettleLatency, 99)))
	if len(r.Errors) > 0 {
		keys := make([]string, 0, len(r.Errors))
		for k := range r.Errors {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  error: %s ×%d\n", k, r.Errors[k])
		}
	}
	fmt.Fprintf(w, "  elapsed %s\n", r.Elapsed.Round(100*time.Millisecond))
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

// ok reports whether the run found nothing wrong.
func (r *report) ok() bool {
	return r.DuplicateEffects == 0 && r.Lost == 0 && r.Mismatched == 0 && r.Unsettled == 0 &&
		r.Succeeded == r.Config.Agents*r.Config.Proposals
}
