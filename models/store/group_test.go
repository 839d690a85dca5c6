package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libtnb/sqlite"
	"gorm.io/gorm"

	"github.com/countersign/countersign/internal/dbfault"
	"github.com/countersign/countersign/models"
)

// groupStore is a SQLite store with a scratch table, counting the
// transactions its writer begins.
type groupStore struct {
	*Store
	begins atomic.Int64
}

func openGroupStore(t *testing.T, wrap func(driver.Driver) driver.Driver) *groupStore {
	t.Helper()
	gs := &groupStore{}
	st, err := Open("sqlite://"+filepath.Join(t.TempDir(), "g.db"), Options{WrapDriver: wrap,
		OnStatement: func(q string) {
			if strings.HasPrefix(q, "BEGIN") {
				gs.begins.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	gs.Store = st
	if err := st.db.Exec("CREATE TABLE group_t (k TEXT PRIMARY KEY, v TEXT NOT NULL)").Error; err != nil {
		t.Fatal(err)
	}
	return gs
}

func insertRow(tx *gorm.DB, k string) error {
	return tx.Exec("INSERT INTO group_t (k, v) VALUES (?, 'x')", k).Error
}

func (gs *groupStore) rows(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	rows, err := gs.readDB.Query("SELECT k, v FROM group_t")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		out[k] = v
	}
	return out
}

// queued starts a transaction that holds the writer, then one caller per
// fn, each once the one before it is queued (the writer takes them in that
// order), and releases the writer when all are queued, so that they run as
// one group (or as several of groupMax). It returns each caller's error,
// or its panic as an error, in order; begins counts the transactions begun
// after the holder's.
func (gs *groupStore) queued(t *testing.T, ctxs []context.Context, fns []func(tx *gorm.DB) error) []error {
	t.Helper()
	release, holding := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := gs.tx(context.Background(), func(tx *gorm.DB) error {
			close(holding)
			<-release
			return nil
		}); err != nil {
			t.Error("holder:", err)
		}
	})
	<-holding
	errs := make([]error, len(fns))
	for i, fn := range fns {
		ctx := context.Background()
		if ctxs != nil && ctxs[i] != nil {
			ctx = ctxs[i]
		}
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					errs[i] = fmt.Errorf("panic: %v", p)
				}
			}()
			errs[i] = gs.tx(ctx, fn)
		})
		deadline := time.Now().Add(10 * time.Second)
		for gs.group.queued() < i+1 {
			if time.Now().After(deadline) {
				t.Fatalf("only %d of %d callers queued", gs.group.queued(), i+1)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	gs.begins.Store(0)
	close(release)
	wg.Wait()
	return errs
}

// Transactions queued behind the writer commit together, and each is
// answered only once the commit that holds its work returned.
func TestGroupCommitsQueuedTransactionsTogether(t *testing.T) {
	t.Parallel()
	gs := openGroupStore(t, nil)
	var fns []func(tx *gorm.DB) error
	for i := range groupMax {
		fns = append(fns, func(tx *gorm.DB) error { return insertRow(tx, fmt.Sprint("k", i)) })
	}
	tx0, commits0, _ := gs.WriteCommits()
	errs := gs.queued(t, nil, fns)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	if n := gs.begins.Load(); n != 1 {
		t.Fatalf("%d transactions began for %d queued members; want one group", n, groupMax)
	}
	// The holder's transaction and the group's.
	if txs, commits, ok := gs.WriteCommits(); !ok || txs-tx0 != groupMax+1 || commits-commits0 != 2 {
		t.Fatalf("WriteCommits: %d transactions in %d commits (%v), want %d in 2", txs-tx0, commits-commits0, ok, groupMax+1)
	}
	if got := gs.rows(t); len(got) != groupMax {
		t.Fatalf("%d rows stored, want %d", len(got), groupMax)
	}
	// More than groupMax queued: several groups, nobody left behind.
	fns = nil
	for i := range 2*groupMax + 3 {
		fns = append(fns, func(tx *gorm.DB) error { return insertRow(tx, fmt.Sprint("m", i)) })
	}
	for i, err := range gs.queued(t, nil, fns) {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	if n := gs.begins.Load(); n != 3 {
		t.Fatalf("%d transactions for %d members, want 3 groups", n, len(fns))
	}
	if got := gs.rows(t); len(got) != 3*groupMax+3 {
		t.Fatalf("%d rows stored, want %d", len(got), 3*groupMax+3)
	}
}

// A member that fails, violates a constraint or panics loses exactly its
// own work; the caller gets its own error (or panic) back, and every other
// member of the group commits.
func TestGroupMemberFailureUndoesOnlyItsOwnWork(t *testing.T) {
	t.Parallel()
	gs := openGroupStore(t, nil)
	refused := models.Errorf(models.EInvalidState, "refused by the member")
	fns := make([]func(tx *gorm.DB) error, 12)
	for i := range fns {
		k := fmt.Sprint("k", i)
		switch i {
		case 3: // a domain error after writing
			fns[i] = func(tx *gorm.DB) error {
				if err := insertRow(tx, k); err != nil {
					return err
				}
				return refused
			}
		case 5: // a constraint violated after a first write
			fns[i] = func(tx *gorm.DB) error {
				if err := insertRow(tx, k); err != nil {
					return err
				}
				return insertRow(tx, "k0")
			}
		case 8: // a panic after writing
			fns[i] = func(tx *gorm.DB) error {
				if err := insertRow(tx, k); err != nil {
					return err
				}
				panic("member 8 panics")
			}
		default:
			fns[i] = func(tx *gorm.DB) error { return insertRow(tx, k) }
		}
	}
	errs := gs.queued(t, nil, fns)
	if !errors.Is(errs[3], refused) {
		t.Errorf("member 3: %v, want its own error", errs[3])
	}
	if models.ErrorCode(errs[5]) != models.EInternal {
		t.Errorf("member 5: %v, want the constraint's internal error", errs[5])
	}
	if errs[8] == nil || !strings.Contains(errs[8].Error(), "member 8 panics") {
		t.Errorf("member 8: %v, want its panic", errs[8])
	}
	got := gs.rows(t)
	for i := range fns {
		_, stored := got[fmt.Sprint("k", i)]
		failed := i == 3 || i == 5 || i == 8
		if failed && stored {
			t.Errorf("member %d failed but its row is stored", i)
		}
		if !failed && (!stored || errs[i] != nil) {
			t.Errorf("member %d: stored %v, error %v; want its row and no error", i, stored, errs[i])
		}
	}
	if n := gs.begins.Load(); n != 1 {
		t.Fatalf("%d transactions, want one group", n)
	}
}

// Members run one after another, each seeing the work of those before it:
// a conditional UPDATE that many members of one group race for is won by
// exactly one of them, as it is by separate transactions.
func TestGroupMembersRaceLikeSeparateTransactions(t *testing.T) {
	t.Parallel()
	gs := openGroupStore(t, nil)
	if err := gs.db.Exec("INSERT INTO group_t (k, v) VALUES ('token', 'issued')").Error; err != nil {
		t.Fatal(err)
	}
	var won atomic.Int32
	fns := make([]func(tx *gorm.DB) error, 30)
	for i := range fns {
		fns[i] = func(tx *gorm.DB) error {
			res := tx.Exec("UPDATE group_t SET v = ? WHERE k = 'token' AND v = 'issued'", fmt.Sprint("consumed by ", i))
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected != 1 {
				return models.Errorf(models.EAlreadyConsumed, "already consumed")
			}
			won.Add(1)
			return insertRow(tx, fmt.Sprint("write ", i))
		}
	}
	errs := gs.queued(t, nil, fns)
	var ok []int
	for i, err := range errs {
		switch {
		case err == nil:
			ok = append(ok, i)
		case models.ErrorCode(err) != models.EAlreadyConsumed:
			t.Fatalf("member %d: %v", i, err)
		}
	}
	got := gs.rows(t)
	if len(ok) != 1 || won.Load() != 1 || got["token"] != fmt.Sprint("consumed by ", ok[0]) || len(got) != 2 {
		t.Fatalf("winners %v (%d), rows %v; want exactly one", ok, won.Load(), got)
	}
}

// A COMMIT that fails takes the work of every member that succeeded, and
// each of them gets the failed-commit error a transaction of its own would
// have got; a member that failed keeps its own error. After a commit that
// the database applied but never confirmed, the rows are there and the
// members were told the outcome is uncertain, not that it failed.
func TestGroupFailedCommitIsEveryMembersFailedCommit(t *testing.T) {
	t.Parallel()
	for _, mode := range []dbfault.Mode{dbfault.BeforeCommit, dbfault.AfterCommit} {
		in := &dbfault.Injector{}
		gs := openGroupStore(t, in.Wrap)
		refused := models.Errorf(models.EInvalidState, "refused")
		fns := make([]func(tx *gorm.DB) error, 8)
		for i := range fns {
			fns[i] = func(tx *gorm.DB) error {
				if err := insertRow(tx, fmt.Sprint("k", i)); err != nil {
					return err
				}
				if i == 2 {
					return refused
				}
				return nil
			}
		}
		in.Arm(mode, "insert into group_t")
		errs := gs.queued(t, nil, fns)
		// Member 2 failed after others' work was held: when that work is
		// lost, it runs again, alone (and fails again on its own).
		if in.Fired() != 1 || gs.begins.Load() != 2 {
			t.Fatalf("%d faults fired in %d transactions, want the group's one in 2", in.Fired(), gs.begins.Load())
		}
		got := gs.rows(t)
		for i, err := range errs {
			_, stored := got[fmt.Sprint("k", i)]
			if i == 2 {
				if !errors.Is(err, refused) || stored {
					t.Errorf("mode %d member 2: %v, stored %v; want its own error and no row", mode, err, stored)
				}
				continue
			}
			if !errors.Is(err, ErrCommitUncertain) || models.ErrorCode(err) != models.EUnavailable {
				t.Errorf("mode %d member %d: %v; want the failed commit", mode, i, err)
			}
			if stored != (mode == dbfault.AfterCommit) {
				t.Errorf("mode %d member %d: stored %v", mode, i, stored)
			}
		}
	}
}

// A member under which SQLite ends the whole transaction (as it does after
// an I/O error, a full disk or an interrupt) takes nobody's work with it
// silently: the members before it are told nothing of theirs was written,
// and it is true; the members after it run again and commit.
func TestGroupBrokenTransactionLosesNothingSilently(t *testing.T) {
	t.Parallel()
	for _, returns := range []bool{true, false} {
		gs := openGroupStore(t, nil)
		fns := make([]func(tx *gorm.DB) error, 10)
		for i := range fns {
			fns[i] = func(tx *gorm.DB) error {
				if err := insertRow(tx, fmt.Sprint("k", i)); err != nil {
					return err
				}
				if i != 4 {
					return nil
				}
				// What SQLite does itself after SQLITE_FULL or an I/O error.
				if err := tx.Exec("ROLLBACK").Error; err != nil {
					return err
				}
				if returns {
					return errors.New("disk full")
				}
				return nil // a member that did not notice
			}
		}
		errs := gs.queued(t, nil, fns)
		got := gs.rows(t)
		for i, err := range errs {
			_, stored := got[fmt.Sprint("k", i)]
			switch {
			case i < 4:
				if err == nil || models.ErrorCode(err) != models.EUnavailable || stored {
					t.Errorf("returns %v, member %d before the break: %v, stored %v; want unavailable and no row", returns, i, err, stored)
				}
			case i == 4:
				if err == nil || stored {
					t.Errorf("returns %v, the breaking member: %v, stored %v", returns, err, stored)
				}
			default:
				if err != nil || !stored {
					t.Errorf("returns %v, member %d after the break: %v, stored %v; want it run again", returns, i, err, stored)
				}
			}
		}
	}
}

// A caller that gives up while queued leaves without running; one whose
// context ends while its member runs still has its work committed (an
// interrupted write would roll back the whole group), and so do the
// others.
func TestGroupCancellation(t *testing.T) {
	t.Parallel()
	gs := openGroupStore(t, nil)
	gone, cancelGone := context.WithCancel(context.Background())
	during, cancelDuring := context.WithCancel(context.Background())
	var ranGone atomic.Bool
	fns := []func(tx *gorm.DB) error{
		// The first member cancels the second one's context before the
		// writer reaches it.
		func(tx *gorm.DB) error { cancelGone(); return insertRow(tx, "first") },
		func(tx *gorm.DB) error { ranGone.Store(true); return insertRow(tx, "gone") },
		func(tx *gorm.DB) error {
			cancelDuring()
			return insertRow(tx, "during")
		},
		func(tx *gorm.DB) error { return insertRow(tx, "last") },
	}
	errs := gs.queued(t, []context.Context{nil, gone, during, nil}, fns)
	got := gs.rows(t)
	if models.ErrorCode(errs[1]) != models.EUnavailable || ranGone.Load() || got["gone"] != "" {
		t.Errorf("cancelled before its turn: %v, ran %v, row %q", errs[1], ranGone.Load(), got["gone"])
	}
	for i, k := range map[int]string{0: "first", 2: "during", 3: "last"} {
		if errs[i] != nil || got[k] == "" {
			t.Errorf("member %d (%s): %v, row %q", i, k, errs[i], got[k])
		}
	}

	// Cancelled while waiting for the writer: an error, nothing run.
	hold := make(chan struct{})
	holding := make(chan struct{})
	go gs.tx(context.Background(), func(tx *gorm.DB) error { close(holding); <-hold; return nil })
	<-holding
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	var ran atomic.Bool
	err := gs.tx(ctx, func(tx *gorm.DB) error { ran.Store(true); return nil })
	close(hold)
	if models.ErrorCode(err) != models.EUnavailable || ran.Load() {
		t.Fatalf("timed out while queued: %v, ran %v", err, ran.Load())
	}
}

// A closed store answers at once instead of queueing forever.
func TestGroupAfterClose(t *testing.T) {
	t.Parallel()
	gs := openGroupStore(t, nil)
	gs.Close()
	err := gs.tx(context.Background(), func(tx *gorm.DB) error { return insertRow(tx, "late") })
	if models.ErrorCode(err) != models.EUnavailable {
		t.Fatalf("after close: %v", err)
	}
}

// Another process that holds the write lock for longer than the busy
// timeout delays a transaction instead of failing it: its BEGIN is tried
// again (nothing of it ran).
func TestBeginOutwaitsAnotherProcess(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "b.db")
	st, err := Open("sqlite://"+path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.db.Exec("CREATE TABLE group_t (k TEXT PRIMARY KEY, v TEXT NOT NULL)").Error; err != nil {
		t.Fatal(err)
	}
	other, err := sql.Open(sqlite.DriverName, SQLiteDSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	holder, err := other.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	go func() {
		time.Sleep(6 * time.Second) // past the 5 s busy timeout
		holder.ExecContext(context.Background(), "COMMIT")
		close(released)
	}()
	if err := st.tx(context.Background(), func(tx *gorm.DB) error { return insertRow(tx, "late") }); err != nil {
		t.Fatalf("a transaction behind another process's: %v", err)
	}
	select {
	case <-released:
	default:
		t.Fatal("the transaction committed while the other process held the lock")
	}
	var n int
	if err := st.readDB.QueryRow("SELECT count(*) FROM group_t WHERE k = 'late'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d rows (%v)", n, err)
	}
}

// consumeOnce is a member racing for the scratch table's one token with a
// conditional UPDATE, as consuming a confirmation token does.
func consumeOnce(i int) func(tx *gorm.DB) error {
	return func(tx *gorm.DB) error {
		res := tx.Exec("UPDATE group_t SET v = ? WHERE k = 'token' AND v = 'issued'", fmt.Sprint("consumed by ", i))
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return models.Errorf(models.EAlreadyConsumed, "already consumed")
		}
		return nil
	}
}

// When the work of a group is lost, a member that failed because of
// another member's lost work (the token it found consumed was not consumed
// after all) is not told so: it runs again on what was committed, as a
// transaction of its own would have run after the failed one. Lost to a
// failed COMMIT, and lost to a transaction broken under a later member.
func TestGroupLostWorkRerunsWhoFailedBecauseOfIt(t *testing.T) {
	t.Parallel()
	// check: of the racers (the first n members), the lost are told their
	// work was lost, exactly one is told it consumed the token and did,
	// and the others that it was consumed.
	check := func(t *testing.T, gs *groupStore, errs []error, n int, lost []int) {
		t.Helper()
		token := gs.rows(t)["token"]
		winners := 0
		for i, err := range errs[:n] {
			switch {
			case slices.Contains(lost, i):
				if err == nil {
					t.Errorf("member %d: its work was lost, yet no error", i)
				}
			case err == nil:
				winners++
				if token != fmt.Sprint("consumed by ", i) {
					t.Errorf("member %d was told it consumed the token, which says %q", i, token)
				}
			case models.ErrorCode(err) != models.EAlreadyConsumed:
				t.Errorf("member %d: %v", i, err)
			}
		}
		if winners != 1 {
			t.Errorf("%d members were told they consumed the token (%q), want exactly 1", winners, token)
		}
	}
	t.Run("failed commit", func(t *testing.T) {
		in := &dbfault.Injector{}
		gs := openGroupStore(t, in.Wrap)
		if err := gs.db.Exec("INSERT INTO group_t (k, v) VALUES ('token', 'issued')").Error; err != nil {
			t.Fatal(err)
		}
		fns := make([]func(tx *gorm.DB) error, 10)
		for i := range fns {
			fns[i] = consumeOnce(i)
		}
		in.Arm(dbfault.BeforeCommit, "update group_t")
		errs := gs.queued(t, nil, fns)
		if !errors.Is(errs[0], ErrCommitUncertain) {
			t.Fatalf("the first member: %v, want the failed commit", errs[0])
		}
		check(t, gs, errs, len(fns), []int{0})
	})
	t.Run("broken transaction", func(t *testing.T) {
		gs := openGroupStore(t, nil)
		if err := gs.db.Exec("INSERT INTO group_t (k, v) VALUES ('token', 'issued')").Error; err != nil {
			t.Fatal(err)
		}
		// Three racers, then a member under which the transaction breaks,
		// then members that only write rows of their own.
		fns := make([]func(tx *gorm.DB) error, 6)
		for i := range 3 {
			fns[i] = consumeOnce(i)
		}
		fns[3] = func(tx *gorm.DB) error {
			if err := tx.Exec("ROLLBACK").Error; err != nil {
				return err
			}
			return errors.New("disk full")
		}
		for i := 4; i < len(fns); i++ {
			fns[i] = func(tx *gorm.DB) error { return insertRow(tx, fmt.Sprint("k", i)) }
		}
		errs := gs.queued(t, nil, fns)
		if errs[3] == nil {
			t.Fatal("the breaking member: no error")
		}
		check(t, gs, errs, 3, []int{0})
		if got := gs.rows(t); errs[4] != nil || errs[5] != nil || got["k4"] == "" || got["k5"] == "" {
			t.Errorf("the members after the break: %v %v, rows %v", errs[4], errs[5], got)
		}
	})
}

// A transaction alone runs its statements on its caller's context without
// cancellation (the driver would watch each with a goroutine of its own),
// yet still ends with that context: given up on half-way, it fails and
// nothing of it stays, as an interrupted statement would have left it.
func TestAloneEndsWithItsContext(t *testing.T) {
	t.Parallel()
	gs := openGroupStore(t, nil)
	for _, settle := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		var watched, rolledBack, ranAfter bool
		err := gs.tx(ctx, func(tx *gorm.DB) error {
			watched = tx.Statement.Context.Done() != nil
			if err := insertRow(tx, fmt.Sprint("before-", settle)); err != nil {
				return err
			}
			cancel()
			if settle {
				// database/sql rolls the transaction back once ctx is
				// done; its statements fail from then on.
				for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
					if tx.Exec("SELECT 1").Error != nil {
						rolledBack = true
						break
					}
				}
				ranAfter = insertRow(tx, fmt.Sprint("after-", settle)) == nil
				return nil
			}
			return insertRow(tx, fmt.Sprint("after-", settle))
		})
		if watched {
			t.Error("the statements of a transaction alone run on a cancellable context")
		}
		if settle && (!rolledBack || ranAfter) {
			t.Errorf("after its context ended: rolled back %v, a statement ran after that %v", rolledBack, ranAfter)
		}
		if err == nil || models.ErrorCode(err) != models.EUnavailable || errors.Is(err, ErrCommitUncertain) {
			t.Errorf("settle %v: %v; want unavailable, certainly not committed", settle, err)
		}
	}
	if got := gs.rows(t); len(got) != 0 {
		t.Fatalf("stored %v", got)
	}
	// The next transaction runs as usual.
	if err := gs.tx(context.Background(), func(tx *gorm.DB) error { return insertRow(tx, "next") }); err != nil {
		t.Fatal(err)
	}
}
