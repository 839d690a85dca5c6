package mcpserver

import "encoding/json"

// resultSchema is the output schema of every tool: the JSON Schema of
// ProposalResult. Tool errors (isError) carry no structured content: their
// text ends with a ToolError's JSON.
var resultSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "proposal_id": {"type": "string"},
    "tool": {"type": "string", "description": "The registry tool the proposal is for."},
    "status": {"type": "string", "enum": ["proposed", "rejected", "awaiting_confirmation", "declined", "cancelled",
      "expired", "confirmed", "revoked", "executing", "succeeded", "failed_retryable", "failed_terminal", "unknown", "superseded"]},
    "preview": {
      "type": "object",
      "properties": {
        "machine": {"type": "object", "description": "The normalized arguments, as they will be executed."},
        "display": {"type": "array", "items": {
          "type": "object",
          "properties": {"name": {"type": "string"}, "label": {"type": "string"}, "display": {"type": "string"}},
          "required": ["name", "label", "display"],
          "additionalProperties": false
        }}
      },
      "required": ["machine", "display"],
      "additionalProperties": false
    },
    "args_digest": {"type": "string", "description": "The digest of the normalized arguments, which approvals and the receipt bind."},
    "request_key": {"type": "string", "description": "The idempotency key of the request (yours, or the one the server derived)."},
    "created_at": {"type": "string", "format": "date-time"},
    "risk_tier": {"type": "string"},
    "confirmation": {"type": "string", "enum": ["click", "webauthn"]},
    "approvals": {
      "type": "object",
      "properties": {"have": {"type": "integer", "minimum": 0}, "need": {"type": "integer", "minimum": 0}},
      "required": ["have", "need"],
      "additionalProperties": false
    },
    "expires_at": {"type": "string", "format": "date-time"},
    "console_url": {"type": "string", "description": "The console page where a person decides."},
    "revision": {"type": "integer", "minimum": 0},
    "reason": {"type": "string", "description": "The reviewer's reason, when declined."},
    "problems": {"type": "array", "description": "Why the business system refused the arguments, when rejected.",
      "items": {"type": "object", "properties": {"pointer": {"type": "string"}, "message": {"type": "string"}},
        "required": ["pointer", "message"], "additionalProperties": false}},
    "executed": {"type": "boolean", "description": "Set by execute_confirmed: whether this call executed the write."},
    "execution": {
      "type": "object",
      "properties": {
        "execution_id": {"type": "string"},
        "status": {"type": "string"},
        "result": {"description": "What the business system answered."},
        "receipt": {"type": "object"}
      },
      "required": ["execution_id", "status", "receipt"],
      "additionalProperties": false
    },
    "supersedes": {"$ref": "#/$defs/edit"},
    "superseded_by": {"$ref": "#/$defs/edit"},
    "next": {"type": "string", "description": "What the status means and what to do next."},
    "kind": {"type": "string", "enum": ["mandate"], "description": "mandate for a request of a standing mandate; absent for a write."},
    "mandate_id": {"type": "string", "description": "The standing mandate that confirmed this write without a person (or that a granted request made live)."},
    "mandate_note": {"type": "string", "description": "Why a standing mandate covering this write could not confirm it; a person decides."},
    "effect": {
      "type": "object",
      "description": "What the business system said, when the write was proposed, it would do: facts, and values before and after.",
      "properties": {
        "facts": {"type": "array", "items": {"type": "object", "properties": {"label": {"type": "string"}, "value": {"type": "string"}},
          "required": ["label", "value"], "additionalProperties": false}},
        "changes": {"type": "array", "items": {"type": "object", "properties": {"field": {"type": "string"}, "label": {"type": "string"},
          "before": {}, "after": {}, "before_display": {"type": "string"}, "after_display": {"type": "string"}},
          "required": ["field", "label", "before", "after", "before_display", "after_display"], "additionalProperties": false}}
      },
      "required": ["facts", "changes"],
      "additionalProperties": false
    },
    "effect_digest": {"type": "string", "description": "The effect's digest, which approvals confirm."}
  },
  "required": ["proposal_id", "tool", "status", "args_digest", "request_key", "created_at", "preview", "risk_tier",
    "confirmation", "approvals", "expires_at", "console_url", "revision", "next"],
  "additionalProperties": false,
  "$defs": {
    "edit": {
      "type": "object",
      "description": "A reviewer edited the arguments instead of declining: the original is superseded, the new version (revised_id) is the one to wait on and execute.",
      "properties": {
        "original_id": {"type": "string"},
        "revised_id": {"type": "string"},
        "editor": {"type": "string", "description": "The reviewer who edited."},
        "reason": {"type": "string"},
        "changes": {"type": "array", "items": {
          "type": "object",
          "properties": {"pointer": {"type": "string"}, "before": {"description": "null when added"}, "after": {"description": "null when removed"}},
          "required": ["pointer", "before", "after"],
          "additionalProperties": false
        }}
      },
      "required": ["original_id", "revised_id", "editor", "reason", "changes"],
      "additionalProperties": false
    }
  }
}`)
