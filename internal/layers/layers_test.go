package layers

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/abacus-stream/abacus/"

// deps lists the abacus packages and the Kafka clients that pkg links (its transitive imports).
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", mod+pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	var ds []string
	for _, d := range strings.Fields(string(out)) {
		if d != mod+pkg {
			ds = append(ds, d)
		}
	}
	return ds
}

// TestImportsRunOneWay fails when a package imports one above it in the flow.
func TestImportsRunOneWay(t *testing.T) {
	above := func(forbidden ...string) []string { return forbidden }
	upper := above("internal/engine", "processors", "sinks", "query", "app", "cmd")
	// What no package of the read side links (query/live aside, which follows the processor's
	// table with goka): the write path, the command, the Kafka clients, the tests' seeds.
	readSide := above("sinks", "processors", "internal/engine", "app", "cmd", "query/internal/querytest",
		"github.com/twmb/franz-go", "github.com/lovoo/goka", "github.com/IBM/sarama")
	rules := map[string][]string{
		// Leaves: nothing of the flow above them.
		"topology":      upper,
		"windows":       upper,
		"state":         upper,
		"totals":        upper,
		"schema":        append(upper, "store"),
		"store":         upper,
		"deadletter":    upper,
		"partitioner":   upper,
		"internal/plan": upper,
		"internal/wire": upper,
		// The accumulators' encodings are read by the engine and (merged at query time) by
		// readers: they know nothing of topologies or plans.
		"accum": append(upper, "topology", "internal/plan", "state", "schema", "store"),
		// The engine runs inside goka callbacks and knows nothing of how it is deployed.
		"internal/engine": above("processors", "sinks", "query", "app", "cmd"),
		"processors":      above("sinks", "query", "app", "cmd"),
		"sinks":           above("processors", "internal/engine", "query", "app", "cmd"),
		// Queries read the schema through the store; they never link the write path, and but for
		// the live view no Kafka client. The reader (query) is under both APIs and the security
		// they are served with; the OpenTSDB API is under the HTTP server that mounts it.
		"query":          slices.Concat(readSide, above("query/httpapi", "query/opentsdb", "query/httpsec", "query/live")),
		"query/opentsdb": slices.Concat(readSide, above("query/httpapi", "query/httpsec")),
		"query/httpapi":  readSide,
		"query/httpsec":  slices.Concat(readSide, above("query")),
		"query/live":     above("sinks", "processors", "internal/engine", "app", "cmd"),
		// The key index sits on the store, under both the sinks that write it and the queries
		// that read it.
		"keyindex": above("sinks", "processors", "internal/engine", "query", "app", "cmd", "github.com/twmb/franz-go", "github.com/lovoo/goka", "github.com/IBM/sarama"),
	}
	// Clients that import nothing else from abacus but utilities, which are leaves themselves.
	utilities := []string{mod + "internal/smallfile"}
	for _, leaf := range []string{"hbase", "kafkasec", "deadletter", "partitioner", "internal/wire", "internal/localtable", "windows", "internal/smallfile", "internal/testenv/gate", "query/httpsec"} {
		for _, d := range deps(t, leaf) {
			if strings.HasPrefix(d, mod) && !slices.Contains(utilities, d) {
				t.Errorf("%s imports %s: it must import nothing else from abacus", leaf, d)
			}
		}
	}
	// The APIs are built on the reader, not beside it: each imports it.
	for _, api := range []string{"query/opentsdb", "query/httpapi"} {
		if !slices.Contains(deps(t, api), mod+"query") {
			t.Errorf("%s does not import query: an API serves the reader's answers", api)
		}
	}
	for pkg, forbidden := range rules {
		for _, d := range deps(t, pkg) {
			for _, f := range forbidden {
				full := f
				if !strings.Contains(f, ".") {
					full = mod + f
				}
				if d == full || strings.HasPrefix(d, full+"/") {
					t.Errorf("%s links %s, which sits above it in the flow", pkg, d)
				}
			}
		}
	}
}

// TestLeavesLinkNoKafkaClient fails when a leaf that describes or encodes data links a Kafka
// client: users' topology code and the encodings must build without one.
func TestLeavesLinkNoKafkaClient(t *testing.T) {
	clients := []string{"github.com/lovoo/goka", "github.com/IBM/sarama", "github.com/twmb/franz-go", "github.com/syndtr/goleveldb"}
	for _, leaf := range []string{"topology", "windows", "state", "totals", "schema", "deadletter", "internal/plan", "partitioner", "accum"} {
		for _, d := range deps(t, leaf) {
			for _, c := range clients {
				if d == c || strings.HasPrefix(d, c+"/") {
					t.Errorf("%s links %s", leaf, d)
				}
			}
		}
	}
}

// TestTestsImportNoBench fails when the tests of a package users build on import a benchmark or
// command package: tests of the product test it with the product's own parts (abacustest,
// internal test support), so a change to a benchmark cannot break or weaken them.
func TestTestsImportNoBench(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .TestImports \" \"}} {{join .XTestImports \" \"}}", mod+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], mod+"bench/") || strings.HasPrefix(f[0], mod+"cmd/") {
			continue
		}
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, mod+"bench/") || strings.HasPrefix(imp, mod+"cmd/") {
				t.Errorf("tests of %s import %s", strings.TrimPrefix(f[0], mod), strings.TrimPrefix(imp, mod))
			}
		}
	}
}
