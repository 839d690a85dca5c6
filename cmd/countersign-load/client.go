package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"
)

// agentClient speaks the agent API to any server of the cluster; a request
// that gets no answer (a killed server, a dropped connection) or a 503 is
// sent again, unchanged, to another server — the duplicate an agent
// following the README produces.
type agentClient struct {
	cl       cluster
	key      string
	http     *http.Client
	deadline time.Time

	mu  sync.Mutex
	rnd *rand.Rand
}

type apiAnswer struct {
	status int
	body   []byte
}

func (a apiAnswer) code() string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	json.Unmarshal(a.body, &e)
	return e.Error.Code
}

func (c *agentClient) server() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cl.URL(c.rnd.IntN(c.cl.Size()))
}

// send sends one request to a random server, once.
func (c *agentClient) send(ctx context.Context, method, path string, body any) (apiAnswer, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return apiAnswer{}, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.server()+path, rd)
	if err != nil {
		return apiAnswer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.http.Do(req)
	if err != nil {
		return apiAnswer{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return apiAnswer{}, err
	}
	return apiAnswer{status: res.StatusCode, body: b}, nil
}

// do sends until a server answers with something other than 503, within
// the run's deadline. retries counts the repeats.
func (c *agentClient) do(ctx context.Context, method, path string, body any, retries *int) (apiAnswer, error) {
	backoff := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			*retries++
		}
		a, err := c.send(ctx, method, path, body)
		if err == nil && a.status != http.StatusServiceUnavailable && a.status != http.StatusBadGateway {
			return a, nil
		}
		if time.Now().Add(backoff).After(c.deadline) || ctx.Err() != nil {
			if err == nil {
				err = fmt.Errorf("HTTP %d %s", a.status, a.code())
			}
			return apiAnswer{}, fmt.Errorf("%s %s: %w (last: %v)", method, path, errBudget, err)
		}
		time.Sleep(backoff)
		backoff = min(backoff*2, time.Second)
	}
}

// proposalView is what the load tool reads of a proposal.
type proposalView struct {
	ID                string `json:"id"`
	Status            string `json:"status"`
	Revision          int64  `json:"revision"`
	ConfirmationToken string `json:"confirmation_token"`
	Execution         *struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	} `json:"execution"`
}

// reviewerClient is a person in a browser: a cookie jar, the sign-in form
// with its CSRF token, and the approve form of each pending proposal.
type reviewerClient struct {
	cl             cluster
	org, user, pwd string
	http           *http.Client
	rnd            *rand.Rand
}

var (
	csrfInput   = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)
	digestInput = regexp.MustCompile(`name="digest" value="([^"]+)"`)
	effectInput = regexp.MustCompile(`name="effect" value="([^"]+)"`)
	pendingLink = regexp.MustCompile(`href="/proposals/(prop_[0-9a-z]+)"`)
)

func newReviewer(cl cluster, org, user, pwd string, seed uint64) *reviewerClient {
	jar, _ := cookiejar.New(nil) // cookies of 127.0.0.1 hold for every port: one session, any server
	return &reviewerClient{cl: cl, org: org, user: user, pwd: pwd, rnd: rand.New(rand.NewPCG(seed, 7)),
		http: &http.Client{Jar: jar, Timeout: 15 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (r *reviewerClient) page(ctx context.Context, method, path string, form url.Values) (int, string, error) {
	var rd io.Reader
	if form != nil {
		rd = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, r.cl.URL(r.rnd.IntN(r.cl.Size()))+path, rd)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Accept", "text/html")
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	res, err := r.http.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	return res.StatusCode, string(b), err
}

// login signs in through the form.
func (r *reviewerClient) login(ctx context.Context) error {
	status, body, err := r.page(ctx, http.MethodGet, "/login", nil)
	if err != nil {
		return err
	}
	m := csrfInput.FindStringSubmatch(body)
	if status != http.StatusOK || m == nil {
		return fmt.Errorf("sign-in page: HTTP %d without a CSRF token", status)
	}
	status, _, err = r.page(ctx, http.MethodPost, "/login", url.Values{"csrf_token": {m[1]},
		"org": {r.org}, "username": {r.user}, "password": {r.pwd}})
	if err != nil {
		return err
	}
	if status != http.StatusSeeOther {
		return fmt.Errorf("sign-in: HTTP %d", status)
	}
	return nil
}

// pending lists the ids on the pending page; signedOut reports a redirect
// to the sign-in page.
func (r *reviewerClient) pending(ctx context.Context) (ids []string, signedOut bool, err error) {
	status, body, err := r.page(ctx, http.MethodGet, "/", nil)
	if err != nil {
		return nil, false, err
	}
	if status == http.StatusSeeOther || status == http.StatusUnauthorized {
		return nil, true, nil
	}
	if status != http.StatusOK {
		return nil, false, fmt.Errorf("pending page: HTTP %d", status)
	}
	seen := map[string]bool{}
	for _, m := range pendingLink.FindAllStringSubmatch(body, -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			ids = append(ids, m[1])
		}
	}
	return ids, false, nil
}

// approve opens the proposal page and sends its approve form (CSRF token,
// the digest shown and the effect digest, when the page shows an effect). approved=false with no error means the page had no
// approve form (decided meanwhile) or the approval was refused as already
// decided.
func (r *reviewerClient) approve(ctx context.Context, id string) (approved bool, err error) {
	status, body, err := r.page(ctx, http.MethodGet, "/proposals/"+id, nil)
	if err != nil {
		return false, err
	}
	if status != http.StatusOK {
		return false, fmt.Errorf("proposal page %s: HTTP %d", id, status)
	}
	csrf, digest := csrfInput.FindStringSubmatch(body), digestInput.FindStringSubmatch(body)
	if csrf == nil || digest == nil || !strings.Contains(body, "/proposals/"+id+"/approve") {
		return false, nil
	}
	form := url.Values{"csrf_token": {csrf[1]}, "digest": {digest[1]}}
	if effect := effectInput.FindStringSubmatch(body); effect != nil {
		form.Set("effect", effect[1])
	}
	status, _, err = r.page(ctx, http.MethodPost, "/proposals/"+id+"/approve", form)
	switch {
	case err != nil:
		return false, err
	case status == http.StatusSeeOther:
		return true, nil
	case status == http.StatusConflict:
		return false, nil // another reviewer (or this one, through another server) was first
	default:
		return false, fmt.Errorf("approve %s: HTTP %d", id, status)
	}
}
