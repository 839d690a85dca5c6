package registry

import (
	"math"
	"testing"
)

func TestFormatMoney(t *testing.T) {
	cases := []struct {
		minor    int64
		currency string
		want     string
	}{
		{19900, "CNY", "¥199.00"},
		{500000, "CNY", "¥5,000.00"},
		{500, "JPY", "JP¥500"},
		{1234567, "JPY", "JP¥1,234,567"},
		{123456, "USD", "$1,234.56"},
		{5, "USD", "$0.05"},
		{0, "USD", "$0.00"},
		{99, "EUR", "€0.99"},
		{100000000, "GBP", "£1,000,000.00"},
		{1500, "KWD", "KWD 1.500"},
		{7, "BHD", "BHD 0.007"},
		{1234567, "KRW", "KRW 1,234,567"},
		{123456, "CHF", "CHF 1,234.56"},
		{12345, "CLF", "CLF 1.2345"},
		{-19900, "CNY", "-¥199.00"},
		{-1500, "KWD", "-KWD 1.500"},
		{-500, "JPY", "-JP¥500"},
		{math.MinInt64, "USD", "-$92,233,720,368,547,758.08"},
		{math.MaxInt64, "JPY", "JP¥9,223,372,036,854,775,807"},
	}
	for _, c := range cases {
		got, err := FormatMoney(c.minor, c.currency)
		if err != nil {
			t.Errorf("FormatMoney(%d, %s): %v", c.minor, c.currency, err)
			continue
		}
		if want := c.want; got != want {
			t.Errorf("FormatMoney(%d, %s) = %q, want %q", c.minor, c.currency, got, want)
		}
	}
}

func TestFormatMoneyUnknownCurrency(t *testing.T) {
	for _, cur := range []string{"XYZ", "cny", "", "US"} {
		if got, err := FormatMoney(100, cur); err == nil {
			t.Errorf("FormatMoney(100, %q) = %q, want an error", cur, got)
		}
	}
}

func TestExponentTable(t *testing.T) {
	// Every ISO 4217 currency with exponent 0 or 3.
	want := map[string]int{
		"BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0,
		"KRW": 0, "PYG": 0, "RWF": 0, "UGX": 0, "UYI": 0, "VND": 0, "VUV": 0,
		"XAF": 0, "XOF": 0, "XPF": 0,
		"BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
	}
	for cur, exp := range want {
		if got, ok := minorExponent[cur]; !ok || got != exp {
			t.Errorf("exponent of %s = %d (present %v), want %d", cur, got, ok, exp)
		}
	}
}
