package models

import (
	"errors"
	"fmt"
	"strings"
)

// Code is a stable, machine-readable error code. Codes are part of the public
// API: agents branch on them, so they never change meaning.
type Code string

// Error codes. The comment after each names the HTTP status the API maps it
// to; the mapping itself lives in the web layer.
const (
	EInvalidRequest      Code = "invalid_request"       // 400: malformed JSON, wrong content type, oversize body
	EUnauthenticated     Code = "unauthenticated"       // 401: missing or bad credentials
	EForbidden           Code = "forbidden"             // 403: authenticated but not allowed
	EInvalidSignature    Code = "invalid_signature"     // 403: token signature, algorithm or key is not ours
	ESubjectMismatch     Code = "subject_mismatch"      // 403: caller is not the token's subject
	ETenantMismatch      Code = "tenant_mismatch"       // 403: token belongs to another tenant
	EAudienceMismatch    Code = "audience_mismatch"     // 403: token is for another service
	EOperationMismatch   Code = "operation_mismatch"    // 403: token is for another tool or policy
	EArgsMismatch        Code = "args_mismatch"         // 403: digest, resource or proposal differ
	EStepUpRequired      Code = "step_up_required"      // 403: the tier needs a security-key assertion
	EStepUpFailed        Code = "step_up_failed"        // 403: a security-key assertion did not verify
	EKeyModelRevoked     Code = "key_model_revoked"     // 403: the FIDO metadata reports the security key's model compromised or revoked; the key approves nothing
	ESelfApproval        Code = "self_approval"         // 403: the requester may not approve its own proposal
	EDutyConflict        Code = "separation_of_duties"  // 403: the reviewer's enrolment ties them to the agent's administrator
	ENotFound            Code = "not_found"             // 404: no such object in this tenant
	EMethodNotAllowed    Code = "method_not_allowed"    // 405: the route exists, the method does not
	EUnknownToken        Code = "unknown_token"         // 404: no such token id
	EAlreadyConsumed     Code = "already_consumed"      // 409: token was redeemed before
	EStateChanged        Code = "state_changed"         // 409: business state moved; a new preview is needed
	EEffectChanged       Code = "effect_changed"        // 409: the business system describes the write differently than the reviewer saw
	EIdempotencyKeyReuse Code = "idempotency_key_reuse" // 409: same request key, other digest
	EInvalidState        Code = "invalid_state"         // 409: the proposal is not in a state that allows this
	EAlreadyDecided      Code = "already_decided"       // 409: this reviewer decided this proposal before
	EAlreadyExists       Code = "already_exists"        // 409: a tenant, user or agent with that name exists
	ETokenExpired        Code = "token_expired"         // 410
	EProposalExpired     Code = "proposal_expired"      // 410
	ERevoked             Code = "revoked"               // 410
	ECeremonyExpired     Code = "ceremony_expired"      // 410: a security-key request timed out; start again
	EUnknownTool         Code = "unknown_tool"          // 422: no such tool in the registry
	ESchemaViolation     Code = "schema_violation"      // 422: arguments break the tool's schema
	EClarificationNeeded Code = "clarification_needed"  // 422: a value is ambiguous and was not guessed
	EBusinessRule        Code = "business_rule"         // 422: the business system refused the arguments
	ENotProven           Code = "not_proven"            // 422: verification found a broken element (countersign verify; a chain that no longer continues its signed checkpoint)
	ERateLimited         Code = "rate_limited"          // 429
	EInternal            Code = "internal"              // 500: a bug or an unexpected failure
	EUnavailable         Code = "unavailable"           // 503: database or adapter out of reach; nothing was stored
	EOutcomeUncertain    Code = "outcome_uncertain"     // 503: the write may have been stored; retry with the same request_key or token
)

// FieldProblem names one offending or ambiguous field by its JSON pointer
// (RFC 6901) relative to the arguments object.
type FieldProblem struct {
	Pointer string `json:"pointer"`
	Message string `json:"message"`
}

// Error is the domain error. Message is safe to show to the caller; internal
// causes are kept in Err and never shown.
type Error struct {
	Code    Code
	Message string
	// Fields lists offending fields for schema_violation and
	// clarification_needed, or business problems for business_rule.
	Fields []FieldProblem
	// Details carries code-specific data, e.g. the original execution for
	// already_consumed.
	Details map[string]any
	// Err is the underlying cause, for logs only.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error with code and message that keeps err as its cause.
func Wrap(code Code, err error, message string) *Error {
	return &Error{Code: code, Message: message, Err: err}
}

// ErrorCode returns the code of the first *Error in err's chain, or EInternal
// for any other non-nil error, or "" for nil.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EInternal
}

// ErrorMessage returns the caller-safe message of err: the message of its
// *Error, or a generic text for internal errors, whose text may leak details.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}

// IsCode reports whether err carries the given code.
func IsCode(err error, code Code) bool { return ErrorCode(err) == code }

// StorableText refuses, with EInvalidRequest at pointer, free text that
// holds U+0000: PostgreSQL cannot store it in a text column, and the same
// text must be refused, not stored, on SQLite too, so that no input is
// accepted by one database and lost to an internal error on the other.
// (Arguments are stored as JSON, where U+0000 is an escape, and may hold
// it; reviewers see it as ⟨U+0000⟩.)
func StorableText(pointer, s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return &Error{Code: EInvalidRequest, Message: "text may not hold the character U+0000",
			Fields: []FieldProblem{{Pointer: pointer, Message: "holds U+0000 (NUL), which cannot be stored"}}}
	}
	return nil
}
