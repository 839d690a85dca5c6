// Package verified holds the one value that writes.Service.Confirm
// accepts as proof of how a reviewer authenticated an approval.
//
// Evidence has only unexported fields and this package is internal to
// models, so code outside models (the console's handlers, the MCP server,
// the command line) can pass Evidence along but never make one: a struct
// literal with its fields does not compile there, and neither does an
// import of this package. Inside models two packages make it:
//
//   - models/auth (auth.ApprovalEvidence): who the reviewer is and how the
//     console session began ("pwd", "passkey"). It never says that the
//     write was confirmed with a security key.
//   - models/stepup, and only after it verified a WebAuthn assertion over
//     the proposal's transaction challenge: that sign-in plus the assertion,
//     bound to one proposal and digest.
//
// The zero Evidence says nothing, and Confirm refuses it.
package verified

import (
	"encoding/json"
	"slices"
)

// Evidence is how a reviewer authenticated one approval. See the package
// documentation for who makes it.
type Evidence struct {
	userID string
	signIn []string
	stepUp *stepUp
}

type stepUp struct {
	proposalID string
	argsDigest string
	assertion  json.RawMessage
}

// SignIn is the evidence of a signed-in reviewer: the user id and the
// session's sign-in methods (empty means a password). For models/auth.
func SignIn(userID string, methods []string) Evidence {
	if userID == "" {
		return Evidence{}
	}
	return Evidence{userID: userID, signIn: slices.Clone(methods)}
}

// StepUp adds to a sign-in the security-key assertion the step-up service
// verified over proposal proposalID with arguments argsDigest. For
// models/stepup, after the assertion verified; the zero Evidence when
// signIn is zero or the assertion empty.
func StepUp(signIn Evidence, proposalID, argsDigest string, assertion json.RawMessage) Evidence {
	if signIn.IsZero() || proposalID == "" || argsDigest == "" || len(assertion) == 0 {
		return Evidence{}
	}
	out := signIn
	out.signIn = slices.Clone(signIn.signIn)
	out.stepUp = &stepUp{proposalID: proposalID, argsDigest: argsDigest, assertion: slices.Clone(assertion)}
	return out
}

// IsZero reports whether e is the zero Evidence, which proves nothing.
func (e Evidence) IsZero() bool { return e.userID == "" }

// UserID is the reviewer the evidence is about.
func (e Evidence) UserID() string { return e.userID }

// SignInMethods are how the reviewer's session began.
func (e Evidence) SignInMethods() []string { return slices.Clone(e.signIn) }

// SteppedUp reports whether the evidence carries a verified security-key
// assertion.
func (e Evidence) SteppedUp() bool { return e.stepUp != nil }

// StepUpFor names the proposal and arguments digest the assertion was made
// over; empty without one.
func (e Evidence) StepUpFor() (proposalID, argsDigest string) {
	if e.stepUp == nil {
		return "", ""
	}
	return e.stepUp.proposalID, e.stepUp.argsDigest
}

// Assertion is the verified assertion as stored with the decision
// (stepup.Evidence as JSON); nil without one.
func (e Evidence) Assertion() json.RawMessage {
	if e.stepUp == nil {
		return nil
	}
	return slices.Clone(e.stepUp.assertion)
}
