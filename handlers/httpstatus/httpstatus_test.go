package httpstatus_test

import (
	"net/http"
	"testing"

	"github.com/countersign/countersign/handlers/httpstatus"
	"github.com/countersign/countersign/models"
)

func TestOf(t *testing.T) {
	tests := []struct {
		code models.Code
		want int
	}{
		{models.EInvalidRequest, http.StatusBadRequest},
		{models.EUnauthenticated, http.StatusUnauthorized},
		{models.EArgsMismatch, http.StatusForbidden},
		{models.EStepUpRequired, http.StatusForbidden},
		{models.EStepUpFailed, http.StatusForbidden},
		{models.EKeyModelRevoked, http.StatusForbidden},
		{models.ESelfApproval, http.StatusForbidden},
		{models.EForbidden, http.StatusForbidden},
		{models.ENotFound, http.StatusNotFound},
		{models.EUnknownToken, http.StatusNotFound},
		{models.EMethodNotAllowed, http.StatusMethodNotAllowed},
		{models.EAlreadyDecided, http.StatusConflict},
		{models.EInvalidState, http.StatusConflict},
		{models.EStateChanged, http.StatusConflict},
		{models.EEffectChanged, http.StatusConflict},
		{models.EProposalExpired, http.StatusGone},
		{models.ERevoked, http.StatusGone},
		{models.ECeremonyExpired, http.StatusGone},
		{models.EBusinessRule, http.StatusUnprocessableEntity},
		{models.ENotProven, http.StatusUnprocessableEntity},
		{models.ERateLimited, http.StatusTooManyRequests},
		{models.EUnavailable, http.StatusServiceUnavailable},
		{models.EOutcomeUncertain, http.StatusServiceUnavailable},
		{models.EInternal, http.StatusInternalServerError},
		{models.Code("no_such_code"), http.StatusInternalServerError},
	}
	for _, tt := range tests {
		if got, want := httpstatus.Of(tt.code), tt.want; got != want {
			t.Errorf("Of(%q) = %d, want %d", tt.code, got, want)
		}
	}
}
