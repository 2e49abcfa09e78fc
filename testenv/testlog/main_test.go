package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A `go test -json` stream as the unit stage writes it: a test that skips for want of a service
// (its message marked), one whose subtest does, one skipped for another reason, one that passes,
// a test of another package with the same name, and a compiler's line that is not JSON.
const unitStream = `{"Action":"run","Package":"example/a","Test":"TestKafka"}
{"Action":"output","Package":"example/a","Test":"TestKafka","Output":"    kafka_test.go:12: [needs a service] Kafka broker (ABACUS_KAFKA_BROKERS): ABACUS_NO_SERVICES=1\n"}
{"Action":"skip","Package":"example/a","Test":"TestKafka","Elapsed":0}
{"Action":"run","Package":"example/a","Test":"TestBoth"}
{"Action":"run","Package":"example/a","Test":"TestBoth/kfake"}
{"Action":"pass","Package":"example/a","Test":"TestBoth/kfake","Elapsed":1.5}
{"Action":"run","Package":"example/a","Test":"TestBoth/kafka"}
{"Action":"output","Package":"example/a","Test":"TestBoth/kafka","Output":"    x_test.go:3: [needs a service] Kafka broker\n"}
{"Action":"skip","Package":"example/a","Test":"TestBoth/kafka","Elapsed":0}
{"Action":"pass","Package":"example/a","Test":"TestBoth","Elapsed":1.6}
{"Action":"run","Package":"example/a","Test":"TestLong"}
{"Action":"output","Package":"example/a","Test":"TestLong","Output":"    long_test.go:9: splits regions for half a minute\n"}
{"Action":"skip","Package":"example/a","Test":"TestLong","Elapsed":0}
{"Action":"run","Package":"example/b","Test":"TestKafka"}
{"Action":"pass","Package":"example/b","Test":"TestKafka","Elapsed":42.25}
# example/c [example/c.test]
{"Action":"pass","Package":"example/a","Elapsed":3.1}
`

const mainStream = `{"Action":"run","Package":"example/a","Test":"TestKafka"}
{"Action":"fail","Package":"example/a","Test":"TestKafka","Elapsed":99}
{"Action":"run","Package":"example/a","Test":"TestBoth"}
{"Action":"pass","Package":"example/a","Test":"TestBoth","Elapsed":7}
`

func write(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNeedsServices(t *testing.T) {
	var out strings.Builder
	if err := needsServices(&out, []string{write(t, "unit.json", unitStream)}); err != nil {
		t.Fatal(err)
	}
	// TestBoth runs again whole (its kfake half too): go test selects top-level tests.
	want := "example/a TestBoth\nexample/a TestKafka\n"
	if out.String() != want {
		t.Fatalf("needs-services printed\n%s\nwant\n%s", out.String(), want)
	}
}

func TestNeedsServicesNamesAFile(t *testing.T) {
	if err := needsServices(&strings.Builder{}, nil); err == nil {
		t.Fatal("no files: want an error")
	}
	if err := needsServices(&strings.Builder{}, []string{filepath.Join(t.TempDir(), "missing.json")}); err == nil {
		t.Fatal("a missing file: want an error")
	}
}

func TestSlowest(t *testing.T) {
	unit, main := write(t, "unit.json", unitStream), write(t, "main.json", mainStream)
	var out strings.Builder
	if err := slowest(&out, []string{"-n", "3", "unit=" + unit, "main=" + main}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines, got %q", out.String())
	}
	for i, want := range []string{"99.0 s  main           example/a TestKafka (fail)",
		"42.2 s  unit           example/b TestKafka (pass)", "7.0 s  main           example/a TestBoth (pass)"} {
		if strings.TrimSpace(lines[i]) != want {
			t.Errorf("line %d: %q, want %q", i, strings.TrimSpace(lines[i]), want)
		}
	}
	if err := slowest(&out, []string{"unit"}); err == nil {
		t.Fatal("an argument without STAGE=: want an error")
	}
}
