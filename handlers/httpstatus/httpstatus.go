// Package httpstatus maps the domain's error codes to HTTP statuses. It is
// the one table both the server's error handler (package web) and the
// console handlers use: the console re-renders a page with the status of a
// refusal, and it cannot import package web, which imports the handlers.
package httpstatus

import (
	"net/http"

	"github.com/countersign/countersign/models"
)

// Of is the HTTP status of a domain error code, the same across the whole
// API (SPEC section 7). An unknown code is a bug: 500.
func Of(code models.Code) int {
	switch code {
	case models.EInvalidRequest:
		return http.StatusBadRequest
	case models.EUnauthenticated:
		return http.StatusUnauthorized
	case models.EForbidden, models.EInvalidSignature, models.ESubjectMismatch,
		models.ETenantMismatch, models.EAudienceMismatch, models.EOperationMismatch,
		models.EArgsMismatch, models.EStepUpRequired, models.EStepUpFailed, models.EKeyModelRevoked,
		models.ESelfApproval, models.EDutyConflict:
		return http.StatusForbidden
	case models.ENotFound, models.EUnknownToken:
		return http.StatusNotFound
	case models.EMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case models.EAlreadyConsumed, models.EStateChanged, models.EEffectChanged, models.EIdempotencyKeyReuse,
		models.EInvalidState, models.EAlreadyDecided, models.EAlreadyExists:
		return http.StatusConflict
	case models.ETokenExpired, models.EProposalExpired, models.ERevoked, models.ECeremonyExpired:
		return http.StatusGone
	case models.EUnknownTool, models.ESchemaViolation, models.EClarificationNeeded,
		models.EBusinessRule, models.ENotProven:
		return http.StatusUnprocessableEntity
	case models.ERateLimited:
		return http.StatusTooManyRequests
	case models.EUnavailable, models.EOutcomeUncertain:
		return http.StatusServiceUnavailable
	default: // EInternal and anything unmapped
		return http.StatusInternalServerError
	}
}
