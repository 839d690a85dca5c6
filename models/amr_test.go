package models

import (
	"slices"
	"testing"
)

func TestDecisionAMR(t *testing.T) {
	cases := []struct {
		signIn    []string
		steppedUp bool
		want      []string
	}{
		{nil, false, []string{"pwd"}},
		{[]string{"pwd"}, false, []string{"pwd"}},
		{[]string{"pwd", "webauthn"}, true, []string{"pwd", "webauthn"}},
		{[]string{"passkey"}, false, []string{"passkey"}},
		{[]string{"passkey", "webauthn"}, true, []string{"passkey", "webauthn"}},
		// A session that began with a passkey under the old name is not a
		// step-up.
		{[]string{"webauthn"}, false, []string{"passkey"}},
		{[]string{"pwd", "webauthn"}, false, []string{"pwd", "passkey"}},
	}
	for _, c := range cases {
		if got := DecisionAMR(c.signIn, c.steppedUp); !slices.Equal(got, c.want) {
			t.Errorf("DecisionAMR(%v, %v) = %v, want %v", c.signIn, c.steppedUp, got, c.want)
		}
	}
}
