package httpadapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/countersign/countersign/models"
)

var _ models.DescribeAdapter = (*Adapter)(nil)

type describeBody struct {
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Tenant    string          `json:"tenant"`
}

// Describe asks the business system what a write would do as things stand
// now (POST {base}/describe): the target's facts and the values it would
// change, before → after. The endpoint is optional: a 404 answer means the
// business system describes nothing, and is models.ErrNoDescription.
//
// Errors: EUnavailable when the request fails, times out, is answered with
// anything but 2xx or 404, or the answer is not a description within the
// bounds of models.Description.Check (unknown fields are refused too).
func (a *Adapter) Describe(ctx context.Context, req models.DescribeRequest) (models.Description, error) {
	var d models.Description
	body, err := json.Marshal(describeBody{Tool: req.Tool, Arguments: orNull(req.Arguments), Tenant: req.Tenant})
	if err != nil {
		return d, models.Wrap(models.EInternal, err, "cannot encode the describe request")
	}
	resp, err := a.do(ctx, http.MethodPost, a.endpoint("describe", ""), "", body)
	if err != nil {
		return d, unavailable(fmt.Errorf("httpadapter: describe: %w", err))
	}
	if resp.code == http.StatusNotFound {
		return d, models.ErrNoDescription
	}
	if !is2xx(resp.code) {
		return d, unavailable(fmt.Errorf("httpadapter: describe: HTTP %d", resp.code))
	}
	if resp.tooLarge {
		return d, unavailable(errors.New("httpadapter: describe: response body too large"))
	}
	dec := json.NewDecoder(bytes.NewReader(resp.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return models.Description{}, unavailable(fmt.Errorf("httpadapter: describe: decode answer: %w", err))
	}
	if err := d.Check(); err != nil {
		return models.Description{}, unavailable(fmt.Errorf("httpadapter: describe: %w", err))
	}
	return d, nil
}
