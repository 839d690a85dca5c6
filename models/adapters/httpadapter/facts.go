package httpadapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/countersign/countersign/models"
)

// Bounds on what a business system may show a reviewer as facts: a page
// must stay readable whatever it answers.
const (
	MaxFacts        = 20
	MaxFactLabelLen = 100
	MaxFactValueLen = 500
)

var _ models.FactsAdapter = (*Adapter)(nil)

type factsBody struct {
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Tenant    string          `json:"tenant"`
}

type factsReply struct {
	Facts []models.Fact `json:"facts"`
}

// Facts asks the business system what it knows about a write's target now
// (POST {base}/facts). The endpoint is optional: a 404 answer means the
// business system offers no facts, which is not an error.
//
// Errors: EUnavailable when the request fails, times out, is answered with
// anything but 2xx or 404, or the answer is not {facts: [{label, value}]}
// within MaxFacts entries of bounded length.
func (a *Adapter) Facts(ctx context.Context, req models.FactsRequest) ([]models.Fact, error) {
	body, err := json.Marshal(factsBody{Tool: req.Tool, Arguments: orNull(req.Arguments), Tenant: req.Tenant})
	if err != nil {
		return nil, models.Wrap(models.EInternal, err, "cannot encode the facts request")
	}
	resp, err := a.do(ctx, http.MethodPost, a.endpoint("facts", ""), "", body)
	if err != nil {
		return nil, unavailable(fmt.Errorf("httpadapter: facts: %w", err))
	}
	if resp.code == http.StatusNotFound {
		return nil, nil
	}
	if !is2xx(resp.code) {
		return nil, unavailable(fmt.Errorf("httpadapter: facts: HTTP %d", resp.code))
	}
	if resp.tooLarge {
		return nil, unavailable(errors.New("httpadapter: facts: response body too large"))
	}
	var reply factsReply
	if err := json.Unmarshal(resp.body, &reply); err != nil {
		return nil, unavailable(fmt.Errorf("httpadapter: facts: decode answer: %w", err))
	}
	if len(reply.Facts) > MaxFacts {
		return nil, unavailable(fmt.Errorf("httpadapter: facts: %d facts, at most %d", len(reply.Facts), MaxFacts))
	}
	for _, f := range reply.Facts {
		label, value := strings.TrimSpace(f.Label), strings.TrimSpace(f.Value)
		if label == "" || utf8.RuneCountInString(label) > MaxFactLabelLen || utf8.RuneCountInString(value) > MaxFactValueLen {
			return nil, unavailable(errors.New("httpadapter: facts: a fact needs a label and bounded text"))
		}
	}
	return reply.Facts, nil
}
