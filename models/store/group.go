package store

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
)

// Group commit on SQLite.
//
// SQLite has one writer, and the store one connection to it: concurrent
// write transactions queue for it and run one after another anyway. What
// each of them pays at its COMMIT is writing every page it dirtied to the
// WAL, and most of those pages are the same for all of them: the right
// edge of every table and index that new rows are appended to (executions,
// events, audit entries, the business system's records), and the part of
// each status index that holds the newest rows of a status. So the
// transactions that are waiting when the writer becomes free run together
// in one SQLite transaction, each inside a savepoint of its own, and commit
// once: each such page is written once per group instead of once per
// transaction.
//
// Each member keeps the guarantees of a transaction of its own:
//   - atomic: a member whose function fails (or panics) is rolled back to
//     its savepoint, and only its own work is undone; the others go on;
//   - isolated: members run one after another, each seeing what the ones
//     before it wrote, exactly as if they had run in that order alone;
//   - durable: no member is told it succeeded before the COMMIT that holds
//     its work returned; when that COMMIT fails, every member whose work it
//     held gets the failed-commit error (ErrCommitUncertain) that a
//     transaction of its own would have got;
//   - a member whose transaction cannot go on (a savepoint that SQLite
//     refuses: it rolled the whole transaction back itself, after an I/O
//     error, a full disk or an interrupt) takes nobody's work with it: the
//     members before it were rolled back with it and are told so (their
//     work was not committed), the ones after it run again in a group of
//     their own;
//   - a member that failed after another member's work was held, and so
//     perhaps because of it (a token an earlier member consumed), is not
//     answered with that failure when the held work is lost (a failed
//     COMMIT, a broken transaction): it runs again, as a transaction of
//     its own would have run after the failed one, on what was committed.
//
// A transaction that finds the writer free runs alone, as a transaction of
// its own: its statements run on its caller's context without cancellation
// (quiet), and it ends when that context does (rolled back, not committed).
// In a group of several, members run on their callers' contexts without
// cancellation too, and a member whose context ends while it runs still
// commits with the others: SQLite answers an interrupted write inside a
// transaction by rolling the whole transaction back, which would undo the
// other members' work. A caller that gives up while queued leaves the
// queue without running.

// groupMax bounds the members of one group: one COMMIT's worth of work
// that a late member waits for.
const groupMax = 32

// memberSavepoint is the prefix of the savepoint each member of a group
// runs in (followed by its place in the group).
const memberSavepoint = "cs_member_"

type groupReq struct {
	ctx  context.Context
	fn   func(tx *gorm.DB) error
	done chan groupRes
}

type groupRes struct {
	err      error
	panicked bool
	panicVal any
}

// grouper runs the write transactions of one SQLite store.
type grouper struct {
	s     *Store
	mu    sync.Mutex
	queue []*groupReq // in arrival order
	shut  bool
	ready chan struct{} // something was queued
	stop  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
	// taken counts the transactions the writer took, commits the SQLite
	// transactions it began for them (WriteCommits).
	taken, commits atomic.Int64
}

func newGrouper(s *Store) *grouper {
	g := &grouper{s: s, ready: make(chan struct{}, 1), stop: make(chan struct{})}
	g.wg.Add(1)
	go g.loop()
	return g
}

// close answers the queued callers, then stops the writer goroutine after
// the group it runs, if any.
func (g *grouper) close() {
	g.once.Do(func() {
		g.mu.Lock()
		queued := g.queue
		g.queue, g.shut = nil, true
		g.mu.Unlock()
		for _, r := range queued {
			r.done <- groupRes{err: dbErr(errStoreClosed)}
		}
		close(g.stop)
	})
	g.wg.Wait()
}

var errStoreClosed = errors.New("sql: database is closed")

// do queues fn for the writer and waits for its outcome.
func (g *grouper) do(ctx context.Context, fn func(tx *gorm.DB) error) error {
	if err := ctx.Err(); err != nil {
		return dbErr(err)
	}
	r := &groupReq{ctx: ctx, fn: fn, done: make(chan groupRes, 1)}
	g.mu.Lock()
	if g.shut {
		g.mu.Unlock()
		return dbErr(errStoreClosed)
	}
	g.queue = append(g.queue, r)
	g.mu.Unlock()
	g.signal()
	var res groupRes
	select {
	case res = <-r.done:
	case <-ctx.Done():
		// Leave the queue if the writer has not taken fn yet; once taken,
		// the writer answers, whatever the context says now.
		if g.withdraw(r) {
			return dbErr(ctx.Err())
		}
		res = <-r.done
	}
	if res.panicked {
		panic(res.panicVal)
	}
	return res.err
}

func (g *grouper) signal() {
	select {
	case g.ready <- struct{}{}:
	default:
	}
}

// withdraw takes r out of the queue; false when the writer took it.
func (g *grouper) withdraw(r *groupReq) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, q := range g.queue {
		if q == r {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			return true
		}
	}
	return false
}

// queued is the number of callers waiting for the writer to take them.
func (g *grouper) queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}

func (g *grouper) loop() {
	defer g.wg.Done()
	for {
		select {
		case <-g.ready:
		case <-g.stop:
			return
		}
		g.mu.Lock()
		n := min(len(g.queue), groupMax)
		group := append([]*groupReq(nil), g.queue[:n]...)
		g.queue = append(g.queue[:0], g.queue[n:]...)
		more := len(g.queue) > 0
		g.mu.Unlock()
		if more {
			g.signal()
		}
		if len(group) == 0 {
			continue
		}
		g.taken.Add(int64(len(group)))
		g.run(group)
		if g.s.ckpt != nil {
			g.s.ckpt.committed()
		}
	}
}

// run commits group, alone or together.
func (g *grouper) run(group []*groupReq) {
	for len(group) > 0 {
		g.commits.Add(1)
		if len(group) == 1 {
			r := group[0]
			pv, panicked, err := call(func() error { return g.s.txAlone(r.ctx, r.fn) })
			r.done <- groupRes{err: err, panicked: panicked, panicVal: pv}
			return
		}
		group = g.together(group)
	}
}

// together runs the members of group in one transaction and answers them;
// it returns the members still to run: those after a member under which
// the transaction broke, and those whose failure may have come from work
// that was then lost.
func (g *grouper) together(group []*groupReq) (rest []*groupReq) {
	tx := g.s.begin(context.Background())
	if tx.Error != nil {
		for _, r := range group {
			r.done <- groupRes{err: dbErr(tx.Error)}
		}
		return nil
	}
	res := make([]groupRes, len(group))
	held := make([]bool, len(group)) // work the COMMIT will hold
	// A member that failed after others' work was held may have failed
	// because of that work (a token an earlier member consumed): if that
	// work is lost, the failure is no answer, and the member runs again.
	after := make([]bool, len(group))
	anyHeld := false
	broken := -1
	for i, r := range group {
		if err := r.ctx.Err(); err != nil {
			res[i] = groupRes{err: dbErr(err)}
			continue
		}
		sp := memberSavepoint + strconv.Itoa(i)
		if err := tx.Exec("SAVEPOINT " + sp).Error; err != nil {
			res[i], broken = groupRes{err: dbErr(err)}, i
			break
		}
		ctx := quiet(r.ctx)
		pv, panicked, err := call(func() error { return r.fn(tx.WithContext(ctx)) })
		if err == nil && !panicked {
			if err := tx.Exec("RELEASE " + sp).Error; err != nil {
				res[i], broken = groupRes{err: dbErr(err)}, i
				break
			}
			held[i], anyHeld = true, true
			continue
		}
		res[i] = groupRes{err: dbErr(err), panicked: panicked, panicVal: pv}
		after[i] = anyHeld && !panicked
		// Undo this member's work only; a transaction SQLite rolled back
		// itself has no savepoint left to go back to.
		if e := tx.Exec("ROLLBACK TO " + sp).Error; e != nil {
			broken = i
			break
		}
		if e := tx.Exec("RELEASE " + sp).Error; e != nil {
			broken = i
			break
		}
	}
	// When the work the group held is lost, each held member gets the
	// error a transaction of its own would have got, and each member that
	// failed after held work runs again.
	var lost error
	members := group
	if broken >= 0 {
		tx.Rollback()
		lost = models.Wrap(models.EUnavailable, errors.New("the group's transaction was rolled back"),
			"the database failed; nothing of this request was written")
		members = group[:broken]
	} else if err := tx.Commit().Error; err != nil {
		lost = failedCommit(err)
	}
	for i, r := range members {
		switch {
		case lost != nil && held[i]:
			res[i] = groupRes{err: lost}
		case lost != nil && after[i]:
			rest = append(rest, r)
			continue
		}
		r.done <- res[i]
	}
	if broken >= 0 {
		group[broken].done <- res[broken]
		rest = append(rest, group[broken+1:]...)
	}
	return rest
}

// WriteCommits reports, on SQLite, how many write transactions the store
// ran since it opened and in how many SQLite transactions (a group is one;
// a group's members that run again begin another): their ratio is the
// average group. ok is false on PostgreSQL.
func (s *Store) WriteCommits() (transactions, commits int64, ok bool) {
	if s.group == nil {
		return 0, 0, false
	}
	return s.group.taken.Load(), s.group.commits.Load(), true
}

// call runs fn and reports a panic instead of passing it on. fn must not
// end its goroutine (runtime.Goexit, testing's FailNow): the writer's
// goroutine would end with it.
func call(fn func() error) (pv any, panicked bool, err error) {
	normal := false
	defer func() {
		if !normal {
			pv, panicked = recover(), true
		}
	}()
	err = fn()
	normal = true
	return nil, false, err
}
