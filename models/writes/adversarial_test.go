package writes_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/adapters/adaptertest"
	"github.com/countersign/countersign/models/adapters/httpadapter"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/token"
	"github.com/countersign/countersign/models/writes"
)

// resign re-signs claims with the service's real key: the signature is
// valid, so only the binding checks can refuse the token.
func (e *env) resign(c models.Claims) string {
	e.t.Helper()
	compact, _, err := e.tokens.Sign(e.ctx, c)
	if err != nil {
		e.t.Fatal(err)
	}
	return compact
}

func TestEveryClaimIsBound(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		p := e.confirm(e.propose("ord_1001", 19900))
		other := e.confirm(e.propose("ord_1002", 100))
		base, err := e.tokens.Verify(e.ctx, p.Token.Compact)
		if err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			name   string
			modify func(c *models.Claims)
			code   models.Code
		}{
			{"aud", func(c *models.Claims) { c.Audience = "refund-service" }, models.EAudienceMismatch},
			{"iss", func(c *models.Claims) { c.Issuer = "someone-else" }, models.EInvalidSignature},
			{"sub", func(c *models.Claims) { c.Subject = "agt_other" }, models.ESubjectMismatch},
			{"tenant", func(c *models.Claims) { c.Tenant = "ten_other" }, models.ETenantMismatch},
			{"op", func(c *models.Claims) { c.Operation = "delete_logs" }, models.EOperationMismatch},
			{"policy", func(c *models.Claims) { c.Policy = "refund-2020" }, models.EOperationMismatch},
			{"args_digest", func(c *models.Claims) { c.ArgsDigest = other.ArgsDigest }, models.EArgsMismatch},
			{"resource", func(c *models.Claims) { c.Resource = "ord_1002" }, models.EArgsMismatch},
			{"request_key", func(c *models.Claims) { c.RequestKey = other.RequestKey }, models.EArgsMismatch},
			{"proposal_id", func(c *models.Claims) { c.ProposalID = other.ID }, models.EArgsMismatch},
			{"jti of another token", func(c *models.Claims) { c.ID = other.Token.JTI }, models.EArgsMismatch},
			{"unknown jti", func(c *models.Claims) { c.ID = "tok_unknown" }, models.EUnknownToken},
			// Re-signed with our own key (as if it leaked): still not the
			// token that was issued under this jti.
			{"exp extended", func(c *models.Claims) { c.Expiry += 3600 }, models.EInvalidSignature},
			{"approvers", func(c *models.Claims) { c.Approvers = append(c.Approvers, "usr_x") }, models.EInvalidSignature},
			{"amr", func(c *models.Claims) { c.AMR = []string{"pwd", "webauthn"} }, models.EInvalidSignature},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				claims := base
				c.modify(&claims)
				_, err := e.svc.Execute(e.ctx, e.agent, p.ID, e.resign(claims))
				wantCode(t, err, c.code)
			})
			if t.Failed() {
				return
			}
		}
		if got := e.order("ord_1001").RefundedMinor; got != 0 {
			t.Fatalf("a tampered token refunded %d", got)
		}
	})
}

func TestForgedTokens(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", nil)
	p := e.confirm(e.propose("ord_1001", 19900))
	parts := strings.Split(p.Token.Compact, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])

	// Payload altered without re-signing.
	altered := bytes.Replace(payload, []byte(`"ord_1001"`), []byte(`"ord_1002"`), 1)
	noResign := parts[0] + "." + base64.RawURLEncoding.EncodeToString(altered) + "." + parts[2]
	// alg none.
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"countersign-confirmation+jwt"}`)) + "." + parts[1] + "."
	// A foreign Ed25519 key that claims our kid.
	_, foreignKey, _ := ed25519.GenerateKey(rand.Reader)
	signingInput := parts[0] + "." + parts[1]
	foreign := signingInput + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(foreignKey, []byte(signingInput)))
	// A token from another countersign installation (its own keys).
	otherStore, err := store.Open("sqlite://"+t.TempDir()+"/other.db", store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer otherStore.Close()
	if _, err := otherStore.Migrate(e.ctx); err != nil {
		t.Fatal(err)
	}
	otherTokens := token.New(otherStore, token.Config{Issuer: "countersign-test", Audience: "countersign-execute"})
	if err := otherTokens.EnsureKey(e.ctx); err != nil {
		t.Fatal(err)
	}
	claims, _ := e.tokens.Verify(e.ctx, p.Token.Compact)
	otherInstall, _, err := otherTokens.Sign(e.ctx, claims)
	if err != nil {
		t.Fatal(err)
	}
	// One flipped bit in the signature.
	sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
	sig[10] ^= 0x01
	flipped := signingInput + "." + base64.RawURLEncoding.EncodeToString(sig)

	for name, tok := range map[string]string{"payload changed": noResign, "alg none": none, "foreign key": foreign,
		"other installation": otherInstall, "flipped bit": flipped, "empty": "", "garbage": "not.a.token"} {
		_, err := e.svc.Execute(e.ctx, e.agent, p.ID, tok)
		if got := models.ErrorCode(err); got != models.EInvalidSignature {
			t.Errorf("%s: code %q (%v), want invalid_signature", name, got, err)
		}
	}
	if got := e.order("ord_1001").RefundedMinor; got != 0 {
		t.Fatalf("a forged token refunded %d", got)
	}
	// The genuine token still works afterwards.
	if _, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact); err != nil {
		t.Fatal(err)
	}
}

func TestOldKeysVerifyAfterRotation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", nil)
	p := e.confirm(e.propose("ord_1001", 100))
	if _, err := e.tokens.Rotate(e.ctx); err != nil {
		t.Fatal(err)
	}
	q := e.confirm(e.propose("ord_1002", 100))
	if p.Token.KeyID == q.Token.KeyID {
		t.Fatal("rotation did not change the signing key")
	}
	for _, x := range []*models.Proposal{p, q} {
		if _, err := e.svc.Execute(e.ctx, e.agent, x.ID, x.Token.Compact); err != nil {
			t.Fatalf("token signed with %s: %v", x.Token.KeyID, err)
		}
	}
	var set struct {
		Keys []map[string]any `json:"keys"`
	}
	b, _ := e.svc.JWKS(e.ctx)
	if err := json.Unmarshal(b, &set); err != nil || len(set.Keys) != 2 {
		t.Fatalf("jwks = %s", b)
	}
	for _, k := range set.Keys {
		if _, ok := k["d"]; ok {
			t.Fatal("JWKS leaks a private key")
		}
	}
}

// httpEnv runs refund_order through the HTTP adapter against a real
// reference business server that counts writes per idempotency key.
func httpEnv(t *testing.T, kind string, timeout time.Duration) (*env, *adaptertest.Server) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	biz := adaptertest.New(secret)
	srv := httptest.NewServer(biz)
	t.Cleanup(srv.Close)
	biz.AddResource("ord_1001", "Order …1001 · Yunqi Rd 88, Hangzhou", 19900)
	e := newEnv(t, kind, func(e *env) *registry.Registry {
		yaml := strings.Replace(string(registry.DemoYAML()), "adapter: {kind: demo_ledger}",
			"adapter: {kind: http, base_url: "+srv.URL+", secret_env: BIZ_SECRET, timeout: 1s}", 1)
		reg, err := registry.Parse([]byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		ad, err := httpadapter.New(httpadapter.Config{BaseURL: srv.URL, Secret: secret, Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		e.adapter["refund_order"] = ad
		return reg
	})
	return e, biz
}

func TestTimeoutIsUnknownThenReconciledWithoutSecondWrite(t *testing.T) {
	t.Parallel()
	eachKind(t, func(t *testing.T, kind string) {
		e, biz := httpEnv(t, kind, 300*time.Millisecond)
		p := e.confirm(e.propose("ord_1001", 5000))
		// The business system applies the write, then answers too late.
		biz.SetExecuteDelay(time.Second)
		ex, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ex.Status, models.StatusUnknown; got != want {
			t.Fatalf("status after timeout = %s, want %s", got, want)
		}
		biz.SetExecuteDelay(0)
		if got := biz.Writes(e.downstreamKey(p)); got != 1 {
			t.Fatalf("writes = %d, want 1", got)
		}
		// Presenting the token again does not send a second write.
		_, err = e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		wantCode(t, err, models.EAlreadyConsumed)
		// Later, the reconciler asks by request key and learns the outcome.
		e.clock.Advance(time.Minute)
		if _, err := e.svc.Reconcile(e.ctx); err != nil {
			t.Fatal(err)
		}
		got, _ := e.svc.Get(e.ctx, e.tenant, p.ID)
		if got.Status != models.StatusSucceeded || got.Execution.ProviderRef == "" {
			t.Fatalf("after reconcile: %s %+v", got.Status, got.Execution)
		}
		if w, calls := biz.Writes(e.downstreamKey(p)), biz.ExecuteCalls(e.downstreamKey(p)); w != 1 || calls != 1 {
			t.Fatalf("writes=%d execute calls=%d, want 1 and 1 (the reconciler only asked)", w, calls)
		}
		if got := biz.Balance("ord_1001"); got != 19900-5000 {
			t.Errorf("balance = %d", got)
		}
	})
}

func TestRetryableFailureRetriesWithTheSameKey(t *testing.T) {
	t.Parallel()
	e, biz := httpEnv(t, "sqlite", 2*time.Second)
	p := e.confirm(e.propose("ord_1001", 1000))
	biz.FailNextExecutes(1)
	ex, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
	if err != nil || ex.Status != models.StatusFailedRetryable {
		t.Fatalf("first attempt: %v %v", ex, err)
	}
	ex, err = e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
	if err != nil || ex.Status != models.StatusSucceeded || ex.Attempts != 2 {
		t.Fatalf("retry: %+v %v", ex, err)
	}
	if got := biz.ExecuteCalls(e.downstreamKey(p)); got != 2 {
		t.Errorf("execute calls with the key = %d, want 2", got)
	}
	if got := biz.Writes(e.downstreamKey(p)); got != 1 {
		t.Errorf("writes = %d, want 1", got)
	}
	_, err = e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
	wantCode(t, err, models.EAlreadyConsumed)
}

func TestStateConflictAtTheBusinessSystem(t *testing.T) {
	t.Parallel()
	e, biz := httpEnv(t, "sqlite", 2*time.Second)
	p := e.confirm(e.propose("ord_1001", 1000))
	biz.Bump("ord_1001") // another channel changed the order after the confirmation
	_, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
	wantCode(t, err, models.EStateChanged)
	if biz.TotalWrites() != 0 {
		t.Fatal("a stale confirmation wrote")
	}
}

// TestCrashBetweenConsumeAndExecute: a process consumed the token and died
// before calling the business system. The reconciler, once the lease has
// run out, asks by request key, learns the write never arrived and sends it
// with the same key: exactly one write.
func TestCrashBetweenConsumeAndExecute(t *testing.T) {
	t.Parallel()
	eachKind(t, func(t *testing.T, kind string) {
		e, biz := httpEnv(t, kind, 2*time.Second)
		p := e.confirm(e.propose("ord_1001", 700))
		now := e.clock.Now()
		_, consumed, err := e.store.ConsumeToken(e.ctx, store.Consume{TenantID: e.tenant, AgentID: e.agent.ID,
			ProposalID: p.ID, JTI: p.Token.JTI, Now: now,
			Execution: models.Execution{ID: models.NewID("exe"), RequestKey: p.RequestKey,
				DownstreamKey: e.downstreamKey(p), Operation: p.Tool,
				ArgsDigest: p.ArgsDigest, LeaseUntil: now.Add(10 * time.Second)}})
		if err != nil || !consumed {
			t.Fatalf("consume: %v %v", consumed, err)
		}
		// …crash. While the lease runs, nobody touches it.
		if n, _ := e.svc.Reconcile(e.ctx); n != 0 || biz.ExecuteCalls(e.downstreamKey(p)) != 0 {
			t.Fatal("reconciler took an execution whose lease had not run out")
		}
		_, err = e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		wantCode(t, err, models.EAlreadyConsumed)
		e.clock.Advance(11 * time.Second)
		// Two reconcilers (two instances) at once: one claims it.
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() { defer wg.Done(); e.svc.Reconcile(e.ctx) }()
		}
		wg.Wait()
		got, _ := e.svc.Get(e.ctx, e.tenant, p.ID)
		if got.Status != models.StatusSucceeded {
			t.Fatalf("after reconcile: %s", got.Status)
		}
		if w := biz.Writes(e.downstreamKey(p)); w != 1 {
			t.Fatalf("writes = %d, want 1", w)
		}
	})
}

// TestTwoInstancesOnePostgres: two services (two processes' worth of state:
// own pools, own key caches) over one PostgreSQL database redeem the same
// token concurrently.
func TestTwoInstancesOnePostgres(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "postgres", nil)
	second := &env{t: t, ctx: e.ctx, clock: e.clock, dbURL: e.dbURL}
	second.openStore()
	second.adapter = map[string]models.Adapter{}
	for _, tool := range registry.Demo().Tools() {
		second.adapter[tool.Name] = second.ledger
	}
	svc2 := second.newService(registry.Demo())

	p := e.confirm(e.propose("ord_1020", 19900))
	var (
		wg              sync.WaitGroup
		mu              sync.Mutex
		success, replay int
	)
	for i := range 40 {
		svc := e.svc
		if i%2 == 1 {
			svc = svc2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				success++
			} else if models.IsCode(err, models.EAlreadyConsumed) {
				replay++
			} else {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if success != 1 || replay != 39 {
		t.Fatalf("success=%d already_consumed=%d", success, replay)
	}
	if got := e.order("ord_1020").RefundedMinor; got != 19900 {
		t.Fatalf("refunded %d", got)
	}
}

func eachKind(t *testing.T, fn func(t *testing.T, kind string)) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			fn(t, kind)
		})
	}
}

// An agent that presents its own valid token with another agent's
// proposal id learns nothing about that proposal: the answer is the one
// for an id that does not exist, as everywhere else in the agent API, and
// nothing of either proposal is consumed.
func TestExecuteOfAnotherAgentsProposalIsNotFound(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		other, err := e.store.CreateAgent(e.ctx, e.tenant, "other-agent", "", "sha256:other")
		if err != nil {
			t.Fatal(err)
		}
		theirs, _, err := e.svc.Propose(e.ctx, other, writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs("ord_1002", 100)})
		if err != nil {
			t.Fatal(err)
		}
		mine := e.confirm(e.propose("ord_1001", 100))
		_, err = e.svc.Execute(e.ctx, e.agent, theirs.ID, mine.Token.Compact)
		wantCode(t, err, models.ENotFound)
		_, unknown := e.svc.Execute(e.ctx, e.agent, "prop_unknown", mine.Token.Compact)
		wantCode(t, unknown, models.ENotFound)
		if models.ErrorMessage(err) != strings.ReplaceAll(models.ErrorMessage(unknown), "prop_unknown", theirs.ID) {
			t.Errorf("the answers differ: %q and %q", models.ErrorMessage(err), models.ErrorMessage(unknown))
		}
		// An agent that may read the tenant's proposals may not act on them.
		reader := e.agent
		reader.ReadAll = true
		_, err = e.svc.Execute(e.ctx, reader, theirs.ID, mine.Token.Compact)
		wantCode(t, err, models.ENotFound)
		if ex, err := e.svc.Execute(e.ctx, e.agent, mine.ID, mine.Token.Compact); err != nil || ex.Status != models.StatusSucceeded {
			t.Fatalf("own execute afterwards: %+v %v", ex, err)
		}
	})
}
