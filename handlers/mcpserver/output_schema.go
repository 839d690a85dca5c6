package mcpserver

import "encoding/json"

// resultSchema is the output schema of every tool: the JSON Schema of
// ProposalResult. Tool errors (isError) carry ToolError instead.
var resultSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "proposal_id": {"type": "string"},
    "tool": {"type": "string", "description": "The registry tool the proposal is for."},
    "status": {"type": "string", "enum": ["proposed", "rejected", "awaiting_confirmation", "declined", "cancelled",
      "expired", "confirmed", "revoked", "executing", "succeeded", "failed_retryable", "failed_terminal", "unknown"]},
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
    "next": {"type": "string", "description": "What the status means and what to do next."}
  },
  "required": ["proposal_id", "tool", "status", "preview", "risk_tier", "confirmation", "approvals",
    "expires_at", "console_url", "revision", "next"],
  "additionalProperties": false
}`)
