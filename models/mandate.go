package models

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// KindMandate is the Kind of a proposal that asks for a standing mandate:
// its Arguments are the canonical MandateTerms, its ArgsDigest their
// digest, and confirming it (with the rules of the highest tier the terms
// cover) makes the mandate live instead of issuing a token. Proposals of
// writes have Kind "".
const KindMandate = "mandate"

// AMRMandate is the amr of a token issued under a standing mandate: no
// person confirmed this very write; the grantors of the mandate did,
// once, for a bounded class of writes.
const AMRMandate = "mandate"

// Bounds of mandate terms.
const (
	MaxMandateReason   = 1000
	MaxMandateList     = 100 // agents, resources, enum values per field
	MaxMandatePattern  = 200 // characters of a resource or id pattern
	MaxMandateDuration = 90 * 24 * time.Hour
)

// MandateTerms are what a standing mandate allows. A proposal fits when
// every stated term holds; terms left empty do not restrict.
type MandateTerms struct {
	// Tool is the one tool the mandate covers, under the rules of
	// PolicyVersion (set from the registry when asked for): when the tool's
	// rules change, the mandate covers nothing more.
	Tool          string `json:"tool"`
	PolicyVersion string `json:"policy_version"`
	// Agents are the ids of the agents whose proposals it covers.
	Agents []string `json:"agents"`
	// Tiers are the risk tiers of Tool it covers, strictest first: the
	// grant follows the rules of Tiers[0]. A proposal of another tier does
	// not fit.
	Tiers []string `json:"tiers"`
	// ResourcePattern, when set, must match the whole target resource id
	// (RE2). Resources, when set, is the explicit set of ids allowed.
	// For a batch, every id of the set must be allowed.
	ResourcePattern string   `json:"resource_pattern,omitempty"`
	Resources       []string `json:"resources,omitempty"`
	// Money names the money field and bounds it per call and in total.
	Money *MandateMoney `json:"money,omitempty"`
	// Enums: for each argument named, the values allowed (strings).
	Enums map[string][]string `json:"enums,omitempty"`
	// Patterns: for each argument named, an RE2 pattern its (string) value
	// must match whole.
	Patterns map[string]string `json:"patterns,omitempty"`
	// MaxUses bounds how many writes the mandate may confirm; 0: no count
	// (then Money.Budget must bound it).
	MaxUses int64 `json:"max_uses,omitempty"`
	// ExpiresAt ends the mandate (right-open), RFC 3339 UTC.
	ExpiresAt time.Time `json:"expires_at"`
	// Reason says why the mandate is asked for; reviewers read it.
	Reason string `json:"reason"`
}

// RefuseServerSetTerms refuses terms, as a request sent them (a JSON
// object), that name a member the server sets: policy_version, which
// Check takes from the registry. Naming it at all is refused, empty or
// null included, so that no client comes to rely on a value it sends
// being kept or ignored. Errors: EInvalidRequest at /policy_version.
// Text that is no object is left to the decoder to refuse.
func RefuseServerSetTerms(raw []byte) error {
	var members map[string]json.RawMessage
	if json.Unmarshal(raw, &members) != nil {
		return nil
	}
	if _, ok := members["policy_version"]; ok {
		return &Error{Code: EInvalidRequest, Message: "policy_version is set by the server from the registry; leave it out",
			Fields: []FieldProblem{{Pointer: "/policy_version", Message: "is set by the server; leave it out"}}}
	}
	return nil
}

// MandateMoney is the money term of a mandate: an integer field in minor
// units, the field naming its currency and the one currency allowed, a
// cap per call and a total budget (0: none).
type MandateMoney struct {
	Field         string `json:"field"`
	CurrencyField string `json:"currency_field"`
	Currency      string `json:"currency"`
	PerCallCap    int64  `json:"per_call_cap,omitempty"`
	Budget        int64  `json:"budget,omitempty"`
}

// MandateTool is what terms are checked against: the tool's top-level
// argument names, its money fields (display kind money, with the field
// naming their currency) and its tiers, in the order of its risk rules
// (which says nothing of their strictness: NoStricterThan does).
type MandateTool struct {
	Name          string
	PolicyVersion string
	Properties    []string
	Money         map[string]string // amount field → currency field
	Tiers         []Tier
}

// tier returns the tool's tier of that name.
func (t MandateTool) tier(name string) (Tier, bool) {
	for _, x := range t.Tiers {
		if x.Name == name {
			return x, true
		}
	}
	return Tier{}, false
}

// covered is what terms naming tier top cover: top and every tier of the
// tool strictly less strict than it, top first. A tier as strict as top
// in every respect but another is a category of its own (scheduled
// refunds beside immediate ones) and is named on its own.
func (t MandateTool) covered(top Tier) []string {
	out := []string{top.Name}
	for _, x := range t.Tiers {
		if x.Name != top.Name && x.NoStricterThan(top) && !top.NoStricterThan(x) {
			out = append(out, x.Name)
		}
	}
	return out
}

// strictest returns the tool's tier that is at least as strict as every
// other, if one is.
func (t MandateTool) strictest() (Tier, bool) {
	for _, x := range t.Tiers {
		all := true
		for _, y := range t.Tiers {
			all = all && y.NoStricterThan(x)
		}
		if all {
			return x, true
		}
	}
	return Tier{}, false
}

var currencyRE = regexp.MustCompile(`^[A-Z]{3}$`)

// Check validates terms against the tool at now and puts them in their
// canonical order (sorted lists, UTC time to the second). Errors:
// EInvalidRequest with a field problem per fault.
func (t *MandateTerms) Check(tool MandateTool, now time.Time) error {
	var probs []FieldProblem
	bad := func(ptr, format string, args ...any) {
		probs = append(probs, FieldProblem{Pointer: ptr, Message: fmt.Sprintf(format, args...)})
	}
	if t.Tool != tool.Name {
		bad("/tool", "no tool named %q", t.Tool)
	}
	t.PolicyVersion = tool.PolicyVersion
	t.Reason = strings.TrimSpace(t.Reason)
	if t.Reason == "" || utf8.RuneCountInString(t.Reason) > MaxMandateReason {
		bad("/reason", "say why the mandate is needed (1–%d characters)", MaxMandateReason)
	}
	t.Agents = sortedSet(t.Agents)
	if len(t.Agents) == 0 || len(t.Agents) > MaxMandateList {
		bad("/agents", "name 1–%d agents the mandate covers", MaxMandateList)
	}
	t.ExpiresAt = t.ExpiresAt.UTC().Truncate(time.Second)
	if !t.ExpiresAt.After(now) || t.ExpiresAt.Sub(now) > MaxMandateDuration {
		bad("/expires_at", "must be in the future and at most %d days ahead", int(MaxMandateDuration.Hours()/24))
	}
	// Tiers: the strictest covered tier and every less strict one, by
	// what each requires (NoStricterThan), never by the order of the
	// tool's rules; by default the tier that is at least as strict as all.
	if len(t.Tiers) == 0 {
		if top, ok := tool.strictest(); ok {
			t.Tiers = []string{top.Name}
		} else {
			bad("/tiers", "no tier of tool %s is at least as strict as all the others: name the strictest tier to cover", tool.Name)
		}
	}
	if len(t.Tiers) > 0 {
		if top, ok := tool.tier(t.Tiers[0]); !ok {
			bad("/tiers", "tool %s has no tier %q", tool.Name, t.Tiers[0])
		} else {
			t.Tiers = tool.covered(top)
		}
	}
	if t.ResourcePattern != "" && len(t.Resources) > 0 {
		bad("/resources", "give a resource pattern or a resource set, not both")
	}
	if t.ResourcePattern != "" {
		if _, err := anchored(t.ResourcePattern); err != nil {
			bad("/resource_pattern", "%v", err)
		}
	}
	if len(t.Resources) > MaxMandateList {
		bad("/resources", "at most %d resources", MaxMandateList)
	}
	t.Resources = sortedSet(t.Resources)
	if t.Money != nil {
		m := t.Money
		if cur, ok := tool.Money[m.Field]; !ok {
			bad("/money/field", "%q is not a money field of %s", m.Field, tool.Name)
		} else if m.CurrencyField == "" {
			m.CurrencyField = cur
		} else if m.CurrencyField != cur {
			bad("/money/currency_field", "the currency of %s is in %q", m.Field, cur)
		}
		if !currencyRE.MatchString(m.Currency) {
			bad("/money/currency", "an ISO 4217 code such as EUR")
		}
		if m.PerCallCap < 0 || m.Budget < 0 || (m.PerCallCap == 0 && m.Budget == 0) {
			bad("/money", "give a positive per_call_cap, budget or both")
		}
	}
	if t.MaxUses < 0 || (t.MaxUses == 0 && (t.Money == nil || t.Money.Budget == 0)) {
		bad("/max_uses", "a mandate needs a budget, a use count or both")
	}
	for f, vals := range t.Enums {
		if !slices.Contains(tool.Properties, f) {
			bad("/enums/"+f, "%s has no argument %q", tool.Name, f)
		}
		t.Enums[f] = sortedSet(vals)
		if len(t.Enums[f]) == 0 || len(vals) > MaxMandateList {
			bad("/enums/"+f, "name 1–%d allowed values", MaxMandateList)
		}
	}
	for f, pat := range t.Patterns {
		if !slices.Contains(tool.Properties, f) {
			bad("/patterns/"+f, "%s has no argument %q", tool.Name, f)
		}
		if _, err := anchored(pat); err != nil {
			bad("/patterns/"+f, "%v", err)
		}
	}
	if len(probs) > 0 {
		return &Error{Code: EInvalidRequest, Message: "the mandate's terms are not valid", Fields: probs}
	}
	return nil
}

// Canonical returns the terms as canonical JSON and their digest.
func (t *MandateTerms) Canonical() (json.RawMessage, string, error) {
	b, err := json.Marshal(t)
	if err != nil {
		return nil, "", Wrap(EInternal, err, "cannot encode mandate terms")
	}
	c, err := Canonical(b)
	if err != nil {
		return nil, "", err
	}
	d, err := Digest(c)
	return c, d, err
}

func anchored(pat string) (*regexp.Regexp, error) {
	if pat == "" || utf8.RuneCountInString(pat) > MaxMandatePattern {
		return nil, fmt.Errorf("a pattern of 1–%d characters", MaxMandatePattern)
	}
	re, err := regexp.Compile(`^(?:` + pat + `)$`)
	if err != nil {
		return nil, fmt.Errorf("not a valid pattern: %v", err)
	}
	return re, nil
}

func sortedSet(in []string) []string {
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}

// MandateStatus is active or revoked; expiry is read from the terms.
type MandateStatus string

// Mandate states.
const (
	MandateActive  MandateStatus = "active"
	MandateRevoked MandateStatus = "revoked"
)

// Mandate is a live or past standing mandate: granted terms and their
// consumption. Spent and Uses change only by the store's conditional
// update that also issues the token.
type Mandate struct {
	ID          string
	TenantID    string
	ProposalID  string // the mandate proposal that granted it
	Terms       MandateTerms
	TermsDigest string
	Status      MandateStatus
	Spent       int64
	Uses        int64
	// Grantors are the user ids whose approvals granted it, GrantorNames
	// their names.
	Grantors     []string
	GrantorNames []string
	GrantedAt    time.Time
	RevokedAt    *time.Time
	RevokedBy    string
	// GrantorDisabled is set when a grantor's account is disabled: the
	// mandate then confirms nothing (until the account is enabled again
	// or an administrator revokes the mandate).
	GrantorDisabled bool
}

// Live reports whether the mandate may confirm writes at now (right-open
// at ExpiresAt): active, unexpired, and no grantor disabled.
func (m *Mandate) Live(now time.Time) bool {
	return m.State(now) == MandateStateLive
}

// MandateState is what a mandate's stored status and terms mean at a
// moment, as people are shown it.
type MandateState string

// Mandate states, in the order State decides them.
const (
	MandateStateRevoked MandateState = "revoked" // an administrator revoked it
	MandateStateStopped MandateState = "stopped" // a grantor's account is disabled
	MandateStateExpired MandateState = "expired" // its terms' expiry has passed
	MandateStateLive    MandateState = "active"  // it may confirm writes that fit
)

// State is the mandate's state at now: revoked first, then stopped, then
// expired (right-open at the terms' ExpiresAt), else live.
func (m *Mandate) State(now time.Time) MandateState {
	switch {
	case m.Status == MandateRevoked:
		return MandateStateRevoked
	case m.GrantorDisabled:
		return MandateStateStopped
	case m.Status != MandateActive || !now.Before(m.Terms.ExpiresAt):
		return MandateStateExpired
	}
	return MandateStateLive
}

// Covers reports whether the mandate is meant for the agent's proposals of
// the tool, whether or not a given one fits.
func (m *Mandate) Covers(agentID, tool string) bool {
	return m.Terms.Tool == tool && slices.Contains(m.Terms.Agents, agentID)
}

// Fallback reasons: why a proposal that a mandate covers still needs a
// person. They are shown to agents and reviewers as they are.
const (
	MandateExpired       = "mandate expired"
	MandateRevokedReason = "mandate revoked"
	MandateOverCap       = "over per-call cap"
	MandateBudgetOut     = "budget exhausted"
	MandateUsesOut       = "use count exhausted"
	MandateTierAbove     = "risk tier above the mandate"
	MandateResourceOut   = "resource not covered by the mandate"
	MandateCurrencyOther = "currency not covered by the mandate"
	MandateGrantorOff    = "a grantor of the mandate was disabled"
	MandatePolicyOther   = "the tool's rules changed since the mandate was granted"
)

// MandateReasonNearer reports whether fallback reason a says that a
// mandate came nearer to confirming a write than reason b does: of the
// live mandates covering a proposal, the one that matched the most (its
// tier, its targets, the terms on arguments) explains best why a person
// must confirm it, and "over per-call cap" from a mandate for this very
// order says more than "resource not covered" from one for other orders.
// Fit checks in the order ranked here.
func MandateReasonNearer(a, b string) bool { return reasonStage(a) > reasonStage(b) }

func reasonStage(reason string) int {
	switch reason {
	case MandateRevokedReason, MandateGrantorOff, MandateExpired:
		return 0
	case MandatePolicyOther:
		return 1
	case MandateTierAbove:
		return 2
	case MandateResourceOut:
		return 3
	case MandateOverCap:
		return 5
	case MandateBudgetOut:
		return 6
	case MandateUsesOut:
		return 7
	}
	return 4 // the terms on arguments: values, patterns, currency, amount
}

// Fit decides whether p, a write proposal of a covered agent and tool, fits
// the mandate's terms at now, given the consumption as read. It returns
// the amount the write spends from the budget (0 without a money term),
// or the reason it does not fit. The store decides again atomically on
// expiry, status, budget and count.
func (m *Mandate) Fit(p *Proposal, now time.Time) (amount int64, reason string) {
	switch m.State(now) {
	case MandateStateRevoked:
		return 0, MandateRevokedReason
	case MandateStateStopped:
		return 0, MandateGrantorOff
	case MandateStateExpired:
		return 0, MandateExpired
	}
	ids := p.ResourceSet
	if !p.Batch() {
		ids = []string{p.Resource}
	}
	amount, reason = m.Terms.Admit(MandateWrite{PolicyVersion: p.PolicyVersion, Tier: p.Tier.Name,
		Resources: ids, Arguments: p.Arguments})
	if reason != "" {
		return 0, reason
	}
	t := &m.Terms
	if t.Money != nil && t.Money.Budget > 0 && m.Spent+amount > t.Money.Budget {
		return 0, MandateBudgetOut
	}
	if t.MaxUses > 0 && m.Uses >= t.MaxUses {
		return 0, MandateUsesOut
	}
	return amount, ""
}

// MandateWrite is what the terms of a mandate judge of one write.
type MandateWrite struct {
	PolicyVersion string
	Tier          string
	// Resources are the write's target ids (a batch's set); nil when not
	// known, and then not checked.
	Resources []string
	// Arguments are the write's normalized arguments; nil when not known
	// (a receipt that keeps them out), and then the terms on arguments
	// (enums, patterns, money) are not checked and amount is 0.
	Arguments json.RawMessage
}

// Admit decides whether the terms allow one write, whatever the mandate's
// state and consumption: the policy version, the tier, every target and
// the terms on arguments. It returns the amount the write spends (0
// without a money term) or the reason it does not fit. Tool and agent are
// the caller's to match (Mandate.Covers). Fit applies it to a proposal;
// a receipt's verifier applies it to what the receipt states.
func (t *MandateTerms) Admit(w MandateWrite) (amount int64, reason string) {
	switch {
	case w.PolicyVersion != t.PolicyVersion:
		return 0, MandatePolicyOther
	case !slices.Contains(t.Tiers, w.Tier):
		return 0, MandateTierAbove
	}
	var re *regexp.Regexp
	if t.ResourcePattern != "" {
		var err error
		if re, err = anchored(t.ResourcePattern); err != nil {
			return 0, MandateResourceOut
		}
	}
	for _, id := range w.Resources {
		if (re != nil && !re.MatchString(id)) || (len(t.Resources) > 0 && !slices.Contains(t.Resources, id)) {
			return 0, MandateResourceOut
		}
	}
	if w.Arguments == nil {
		return 0, ""
	}
	args := map[string]json.RawMessage{}
	dec := json.NewDecoder(bytes.NewReader(w.Arguments))
	dec.UseNumber()
	if err := dec.Decode(&args); err != nil {
		return 0, "arguments unreadable"
	}
	str := func(f string) (string, bool) {
		var s string
		return s, json.Unmarshal(args[f], &s) == nil && args[f] != nil
	}
	for _, f := range sortedKeys(t.Enums) {
		if v, ok := str(f); !ok || !slices.Contains(t.Enums[f], v) {
			return 0, fmt.Sprintf("%s not among the mandate's values", f)
		}
	}
	for _, f := range sortedKeys(t.Patterns) {
		re, err := anchored(t.Patterns[f])
		if v, ok := str(f); err != nil || !ok || !re.MatchString(v) {
			return 0, fmt.Sprintf("%s does not match the mandate's pattern", f)
		}
	}
	if mo := t.Money; mo != nil {
		if cur, ok := str(mo.CurrencyField); !ok || cur != mo.Currency {
			return 0, MandateCurrencyOther
		}
		var n json.Number
		if err := json.Unmarshal(args[mo.Field], &n); err != nil {
			return 0, fmt.Sprintf("%s is not an amount", mo.Field)
		}
		v, err := n.Int64()
		if err != nil || v < 0 {
			return 0, fmt.Sprintf("%s is not an amount", mo.Field)
		}
		if mo.PerCallCap > 0 && v > mo.PerCallCap {
			return 0, MandateOverCap
		}
		amount = v
	}
	return amount, ""
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// MandateNames are the names a mandate's preview shows beside the ids it
// stores: the tool's title and the covered agents' names by id. Either may
// be empty; the ids are shown alone then.
type MandateNames struct {
	ToolTitle string
	Agents    map[string]string
}

// Preview returns the terms as a reviewer reads them: each term with its
// machine value as stored and a display value; money shows amounts in minor
// units with their currency (registry.FormatMoney), the tool and agents
// their names (names) beside their ids.
func (t *MandateTerms) Preview(money func(minor int64, currency string) (string, error), names MandateNames) ([]PreviewField, error) {
	var out []PreviewField
	add := func(name, label string, v any, display string) {
		b, _ := json.Marshal(v)
		out = append(out, PreviewField{Name: name, Label: label, Value: b, Display: display})
	}
	tool := t.Tool + " (rules " + t.PolicyVersion + ")"
	if names.ToolTitle != "" {
		tool = names.ToolTitle + " — " + tool
	}
	add("tool", "Tool", t.Tool, tool)
	agents := make([]string, len(t.Agents))
	for i, id := range t.Agents {
		agents[i] = id
		if n := names.Agents[id]; n != "" {
			agents[i] = n + " (" + id + ")"
		}
	}
	add("agents", "Agents", t.Agents, strings.Join(agents, ", "))
	add("tiers", "Risk tiers covered", t.Tiers, strings.Join(t.Tiers, ", "))
	if t.ResourcePattern != "" {
		add("resource_pattern", "Resources matching", t.ResourcePattern, t.ResourcePattern)
	}
	if len(t.Resources) > 0 {
		add("resources", "Resources", t.Resources, strings.Join(t.Resources, ", "))
	}
	if mo := t.Money; mo != nil {
		if mo.PerCallCap > 0 {
			d, err := money(mo.PerCallCap, mo.Currency)
			if err != nil {
				return nil, err
			}
			add("money.per_call_cap", "Cap per call ("+mo.Field+")", mo.PerCallCap, d)
		}
		if mo.Budget > 0 {
			d, err := money(mo.Budget, mo.Currency)
			if err != nil {
				return nil, err
			}
			add("money.budget", "Total budget ("+mo.Field+")", mo.Budget, d)
		}
	}
	for _, f := range sortedKeys(t.Enums) {
		add("enums."+f, f+" one of", t.Enums[f], strings.Join(t.Enums[f], ", "))
	}
	for _, f := range sortedKeys(t.Patterns) {
		add("patterns."+f, f+" matching", t.Patterns[f], t.Patterns[f])
	}
	if t.MaxUses > 0 {
		add("max_uses", "Uses", t.MaxUses, fmt.Sprintf("%d writes at most", t.MaxUses))
	}
	add("expires_at", "Expires", t.ExpiresAt.Format(time.RFC3339), t.ExpiresAt.Format("2006-01-02 15:04 UTC"))
	add("reason", "Reason", t.Reason, t.Reason)
	return out, nil
}
