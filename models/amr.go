package models

import "slices"

// Authentication method references (the "amr" of decisions and tokens).
// Sign-in methods say how a reviewer's console session began; AMRStepUp
// says that this very write was confirmed with a security key.
const (
	// AMRPassword: signed in with a password (RFC 8176 "pwd").
	AMRPassword = "pwd"
	// AMRPasskey: signed in with a passkey. It says nothing about the write
	// being approved: a session that began with a passkey approves by click
	// like any other.
	AMRPasskey = "passkey"
	// AMRStepUp: the approval carries a verified WebAuthn assertion over
	// this write's transaction challenge (SPEC section 6), kept as evidence.
	// Downstream verifiers read "webauthn" in a token's amr as exactly that.
	AMRStepUp = "webauthn"
)

// DecisionAMR returns the amr recorded for an approval: the session's
// sign-in methods, plus AMRStepUp only when the approval carries step-up
// evidence. Without evidence, a "webauthn" among the sign-in methods (how
// passkey sign-ins were named before AMRPasskey) is read as AMRPasskey, so
// that no session can pass its sign-in off as a step-up. An empty sign-in
// list means a password.
func DecisionAMR(signIn []string, steppedUp bool) []string {
	out := make([]string, 0, len(signIn)+1)
	for _, m := range signIn {
		if m == AMRStepUp {
			if steppedUp {
				continue // added once, below
			}
			m = AMRPasskey
		}
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		out = append(out, AMRPassword)
	}
	if steppedUp {
		out = append(out, AMRStepUp)
	}
	return out
}
