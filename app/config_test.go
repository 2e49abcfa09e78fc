package app

import (
	"strings"
	"testing"
)

// TestExampleConfigIsValid keeps the documented example config loadable and valid.
func TestExampleConfigIsValid(t *testing.T) {
	c, err := LoadConfig("../examples/devices/abacus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.EnsureDefaults()
	if err := c.Validate([]string{"devices"}); err != nil {
		t.Fatal(err)
	}
	if c.Sinks.Aggregates.SaltBuckets != 16 || c.Sinks.Facts.Group != "devices-facts-sink" {
		t.Fatalf("example config read as %+v", c.Sinks)
	}
}

func TestExpandEnv(t *testing.T) {
	env := map[string]string{"A": "x", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for in, want := range map[string]string{
		"plain $A stays":        "plain $A stays",
		"${A}-${A}":             "x-x",
		"e=${EMPTY}.":           "e=.",
		"no braces ${A":         "error: unterminated",
		"unset ${MISSING}":      "error: MISSING is not set",
		"# ${MISSING}\nk: ${A}": "# ${MISSING}\nk: x",
	} {
		got, err := expandEnv([]byte(in), lookup)
		if strings.HasPrefix(want, "error: ") {
			if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(want, "error: ")) {
				t.Errorf("%q: error %v, want %q", in, err, want)
			}
			continue
		}
		if err != nil || string(got) != want {
			t.Errorf("%q -> %q %v, want %q", in, got, err, want)
		}
	}
}
