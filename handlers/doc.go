// Package handlers groups countersign's HTTP handlers by audience: the agent
// JSON API lives in handlers/api, the reviewer console in handlers/console,
// status-code mapping shared by both in handlers/httpstatus, and the wording
// of JSON decoding errors shared by the API and the MCP server in
// handlers/jsonerr. Each handler package declares the small interface it
// consumes and holds no application logic: decoding, calling the domain and
// encoding.
package handlers
