package main

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/countersign/countersign/models/adapters/adaptertest"
)

// bizFaults is the reference business system (adaptertest) behind a layer
// that injects faults into execute calls, each with probability rate:
//
//   - slow: the write is applied, the answer comes after slowDelay (longer
//     than the adapter timeout, so countersign sees no answer);
//   - error: HTTP 500 before anything is applied;
//   - drop: the write is applied, then the connection is closed without an
//     answer (a crash after commit).
//
// Validate and status calls pass through untouched.
type bizFaults struct {
	biz       *adaptertest.Server
	rate      float64
	slowDelay time.Duration

	mu  sync.Mutex
	rnd *rand.Rand

	slow, errors, drops atomic.Int64
}

func newBizFaults(biz *adaptertest.Server, rate float64, slowDelay time.Duration, seed uint64) *bizFaults {
	return &bizFaults{biz: biz, rate: rate, slowDelay: slowDelay, rnd: rand.New(rand.NewPCG(seed, seed^0x5eed))}
}

// pick draws the fault for one execute call: 0 none, 1 slow, 2 error, 3 drop.
func (f *bizFaults) pick() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rate <= 0 || f.rnd.Float64() >= f.rate {
		return 0
	}
	return 1 + f.rnd.IntN(3)
}

func (f *bizFaults) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/execute" {
		f.biz.ServeHTTP(w, r)
		return
	}
	switch f.pick() {
	case 1:
		f.slow.Add(1)
		rec := httptest.NewRecorder()
		f.biz.ServeHTTP(rec, r)
		t := time.NewTimer(f.slowDelay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
		copyRecorded(w, rec)
	case 2:
		f.errors.Add(1)
		http.Error(w, "injected failure", http.StatusInternalServerError)
	case 3:
		f.drops.Add(1)
		rec := httptest.NewRecorder()
		f.biz.ServeHTTP(rec, r)
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler) // closes the connection without an answer
	default:
		f.biz.ServeHTTP(w, r)
	}
}

func copyRecorded(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}
