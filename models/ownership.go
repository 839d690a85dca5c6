package models

// ProposedBy reports whether agent proposed p: the same agent in the same
// tenant. Agent-facing surfaces that act on an agent's own proposals (the
// MCP tools) treat anything else as not found.
func (p *Proposal) ProposedBy(agent Agent) bool {
	return p.AgentID == agent.ID && p.TenantID == agent.TenantID
}
