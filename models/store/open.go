package store

// The predicates of the partial indexes that hold open rows only
// (migrations/00020_open_partial_indexes.sql): proposals awaiting
// confirmation, tokens issued and not yet redeemed or expired, executions
// not yet settled. A row that settles leaves these indexes with one delete,
// and settled history never enters them.
//
// A query is served by one of these indexes only when its WHERE clause
// carries the index's predicate as one of its AND terms, word for word
// with the same literals: SQLite's test of implication is syntactic (a
// `status = ?` bound later does not match, or makes the statement be
// prepared again at each bind), and PostgreSQL proves implication from
// constants only, so a generic plan for `status = $1` cannot use the index.
// So each query below names its open set with these constants, and
// TestOpenIndexPredicates checks that they are the migration's text.
const (
	// awaitingProposal: proposals_awaiting_expires (expires_at),
	// proposals_agent_awaiting (agent_id, expires_at) and
	// proposals_tenant_awaiting_expires (tenant_id, expires_at, id).
	awaitingProposal = "status = 'awaiting_confirmation'"
	// issuedToken: tokens_issued_expires (expires_at).
	issuedToken = "status = 'issued'"
	// openExecution: executions_open_lease (status, lease_until), for
	// every status an execution may leave: executing, failed_retryable
	// and unknown.
	openExecution = "status IN ('executing', 'failed_retryable', 'unknown')"
)
