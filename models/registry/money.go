package registry

import (
	"fmt"
	"strconv"
	"strings"
)

// minorExponent maps ISO 4217 currency codes to their minor-unit exponent:
// the number of decimal digits between the minor and the major unit. It
// holds every currency with exponent 0, 3 and 4 and the common ones with
// exponent 2. A currency that is not here cannot be displayed, because
// guessing its exponent would show a reviewer an amount off by a factor of
// ten or more.
var minorExponent = map[string]int{
	// Exponent 0.
	"BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0,
	"KRW": 0, "PYG": 0, "RWF": 0, "UGX": 0, "UYI": 0, "VND": 0, "VUV": 0,
	"XAF": 0, "XOF": 0, "XPF": 0,
	// Exponent 3.
	"BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
	// Exponent 4.
	"CLF": 4, "UYW": 4,
	// Exponent 2 (the common ones).
	"AED": 2, "ARS": 2, "AUD": 2, "BDT": 2, "BGN": 2, "BRL": 2, "CAD": 2,
	"CHF": 2, "CNY": 2, "COP": 2, "CZK": 2, "DKK": 2, "DZD": 2, "EGP": 2,
	"EUR": 2, "GBP": 2, "GHS": 2, "HKD": 2, "HUF": 2, "IDR": 2, "ILS": 2,
	"INR": 2, "KES": 2, "KZT": 2, "LKR": 2, "MAD": 2, "MOP": 2, "MXN": 2,
	"MYR": 2, "NGN": 2, "NOK": 2, "NZD": 2, "PEN": 2, "PHP": 2, "PKR": 2,
	"PLN": 2, "QAR": 2, "RON": 2, "RSD": 2, "RUB": 2, "SAR": 2, "SEK": 2,
	"SGD": 2, "THB": 2, "TRY": 2, "TWD": 2, "UAH": 2, "USD": 2, "UYU": 2,
	"ZAR": 2,
}

// moneySymbol holds the currencies shown with a symbol instead of their code.
// JPY is "JP¥" so that it is never mistaken for CNY's "¥".
var moneySymbol = map[string]string{
	"CNY": "¥",
	"JPY": "JP¥",
	"USD": "$",
	"EUR": "€",
	"GBP": "£",
}

// FormatMoney renders an amount given in minor units of an ISO 4217 currency
// for a person to read: CNY 19900 → "¥199.00", CNY 500000 → "¥5,000.00",
// JPY 500 → "JP¥500", USD 123456 → "$1,234.56", KWD 1500 → "KWD 1.500".
// CNY, JPY, USD, EUR and GBP are shown with their symbol, every other
// currency with its code and a space. The number of decimals is the
// currency's ISO 4217 exponent; thousands are separated by commas; a negative
// amount gets a leading "-". An unknown currency code is an error, never a
// guess.
func FormatMoney(minor int64, currency string) (string, error) {
	exp, ok := minorExponent[currency]
	if !ok {
		return "", fmt.Errorf("registry: unknown currency %q", currency)
	}
	neg := minor < 0
	// Through uint64 so that the smallest int64 has a magnitude too.
	mag := uint64(minor)
	if neg {
		mag = -mag
	}
	digits := strconv.FormatUint(mag, 10)
	if len(digits) <= exp {
		digits = strings.Repeat("0", exp-len(digits)+1) + digits
	}
	whole, frac := digits[:len(digits)-exp], digits[len(digits)-exp:]

	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	if sym, ok := moneySymbol[currency]; ok {
		b.WriteString(sym)
	} else {
		b.WriteString(currency)
		b.WriteByte(' ')
	}
	for i, c := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if exp > 0 {
		b.WriteByte('.')
		b.WriteString(frac)
	}
	return b.String(), nil
}
