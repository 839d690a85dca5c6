package store_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// A backoff limit lets exactly its free attempts through when many arrive
// at once, then one attempt per doubling wait, and forgets a key only after
// a quiet window past its last wait.
func TestLoginBackoffLimit(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		now := time.Date(2026, 9, 1, 8, 0, 0, 0, time.UTC)
		window := 15 * time.Minute
		limit := []models.LoginLimit{{Key: "user:acme\nalice", Max: 5, Backoff: 2 * time.Second}}

		var ok atomic.Int32
		var wg sync.WaitGroup
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, allowed, err := st.ReserveLoginAttempt(ctx, now, window, limit)
				if err != nil {
					t.Error(err)
				}
				if allowed {
					ok.Add(1)
				}
			}()
		}
		wg.Wait()
		if got := ok.Load(); got != 5 {
			t.Fatalf("%d of 20 parallel attempts allowed, want the 5 free ones", got)
		}
		retry, allowed, err := st.ReserveLoginAttempt(ctx, now, window, limit)
		if err != nil || allowed || !retry.Equal(now.Add(2*time.Second)) {
			t.Fatalf("after the free attempts: retry %v, allowed %v, err %v; want a 2 s wait", retry, allowed, err)
		}
		// Exactly at the end of the wait one attempt passes, and the next
		// wait is twice as long.
		now = now.Add(2 * time.Second)
		if _, allowed, _ := st.ReserveLoginAttempt(ctx, now, window, limit); !allowed {
			t.Fatal("refused when the wait ended")
		}
		if retry, allowed, _ := st.ReserveLoginAttempt(ctx, now, window, limit); allowed || !retry.Equal(now.Add(4*time.Second)) {
			t.Fatalf("second wait: retry %v, allowed %v; want 4 s", retry, allowed)
		}
		// A window after the last wait is not quiet enough; one more is.
		now = now.Add(4*time.Second + window - time.Millisecond)
		if _, allowed, _ := st.ReserveLoginAttempt(ctx, now, window, limit); !allowed {
			t.Fatal("refused after the wait")
		}
		if _, allowed, _ := st.ReserveLoginAttempt(ctx, now, window, limit); allowed {
			t.Fatal("the key started over before a quiet window")
		}
		now = now.Add(2 * window)
		for i := range 5 {
			if _, allowed, _ := st.ReserveLoginAttempt(ctx, now, window, limit); !allowed {
				t.Fatalf("free attempt %d after a quiet window refused", i+1)
			}
		}
		// A fixed-window limit beside a backoff one: a refusal counts on
		// neither.
		both := append([]models.LoginLimit{{Key: "ip:192.0.2.1", Max: 20}}, limit...)
		if _, allowed, _ := st.ReserveLoginAttempt(ctx, now, window, both); allowed {
			t.Fatal("allowed while the backoff key waits")
		}
		for i := range 20 {
			if _, allowed, _ := st.ReserveLoginAttempt(ctx, now, window, both[:1]); !allowed {
				t.Fatalf("address attempt %d refused: the refused attempt was counted on it", i+1)
			}
		}
		if _, allowed, _ := st.ReserveLoginAttempt(ctx, now, window, both[:1]); allowed {
			t.Error("the address limit of 20 let a 21st attempt through")
		}
	})
}
