package console

import "time"

// SetHeartbeat changes how often the event stream sends its keep-alive
// comment (tests use it as a clock for "nothing else was sent").
func (h *Pages) SetHeartbeat(d time.Duration) { h.heartbeat = d }
