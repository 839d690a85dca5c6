package registry

import "github.com/countersign/countersign/models"

// MandateTool describes the tool for checking a standing mandate's terms:
// its top-level arguments, its money fields (display kind money) with the
// field naming their currency, and its risk tiers in the order of its risk
// rules, each once (their strictness is what each requires:
// models.Tier.NoStricterThan).
func (t *Tool) MandateTool() models.MandateTool {
	mt := models.MandateTool{Name: t.Name, PolicyVersion: t.PolicyVersion, Properties: append([]string(nil), t.order...), Money: map[string]string{}}
	for f, d := range t.display {
		if d.kind == kindMoney {
			mt.Money[f] = d.currencyField
		}
	}
	for _, r := range t.risk {
		seen := false
		for _, x := range mt.Tiers {
			seen = seen || x.Name == r.tier.Name
		}
		if !seen {
			mt.Tiers = append(mt.Tiers, r.tier)
		}
	}
	return mt
}

// TierNamed returns the tier of the tool's risk rules with that name.
func (t *Tool) TierNamed(name string) (models.Tier, bool) {
	for _, r := range t.risk {
		if r.tier.Name == name {
			return r.tier, true
		}
	}
	return models.Tier{}, false
}
