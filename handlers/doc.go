// Package handlers groups countersign's HTTP handlers by audience: the agent
// JSON API lives in handlers/api, the reviewer console in handlers/console,
// and status-code mapping shared by both in handlers/httpstatus. Each handler
// package declares the small interface it consumes and holds no application
// logic: decoding, calling the domain and encoding.
package handlers
