package writes_test

import (
	"encoding/json"
	"errors"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/internal/verified"
	"github.com/countersign/countersign/models/writes"
)

func asErr[T error](err error, target *T) bool { return errors.As(err, target) }

// steppedUp is the evidence models/stepup makes once it has verified a
// security-key assertion over proposalID and digest. These tests exercise
// the protocol's rules, so a fixed assertion stands in for the ceremony;
// the ceremony itself is tested for real in models/stepup and internal/app.
func steppedUp(u models.User, proposalID, digest string, signIn []string, assertion json.RawMessage) writes.Evidence {
	return verified.StepUp(auth.ApprovalEvidence(u, signIn), proposalID, digest, assertion)
}
