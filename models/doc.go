// Package models is countersign's domain: proposals and their state machine,
// confirmation decisions, one-time confirmation tokens, executions and
// receipts, the canonical argument digest and the transport-neutral error
// codes. It imports no HTTP framework and no template engine; persistence
// lives in models/store and the tool registry in models/registry.
package models
