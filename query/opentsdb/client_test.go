package opentsdb

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/internal/testenv/gate"
	"github.com/abacus-stream/abacus/query/internal/querytest"
)

// pythonWithPyOpenTSDB is the Python that testenv/run-tests.sh installs the tests' packages for
// (testenv/python-requirements.txt); ABACUS_PYTHON overrides it.
func pythonWithPyOpenTSDB(t *testing.T) string {
	t.Helper()
	py := os.Getenv("ABACUS_PYTHON")
	if py == "" {
		py = filepath.Join("..", "..", "testenv", ".venv", "bin", "python")
	}
	if err := exec.Command(py, "-c", "import pyopentsdb").Run(); err != nil {
		msg := py + " with pyopentsdb is missing (" + err.Error() + "): testenv/run-tests.sh installs testenv/python-requirements.txt into testenv/.venv"
		gate.Unavailable(t, msg)
	}
	return py
}

// TestPyOpenTSDBClient drives the OpenTSDB-compatible API with pyopentsdb, an OpenTSDB client from
// PyPI written against OpenTSDB itself: a second client, independent of Grafana, with its own
// request shapes (trailing slashes, suggest as a POSTed JSON body, start as a string of seconds,
// every query flag sent) and its own reading of answers and of OpenTSDB's error shape.
func TestPyOpenTSDBClient(t *testing.T) {
	py := pythonWithPyOpenTSDB(t)
	st, table := querytest.CellStore(t)
	querytest.SeedTSDB(t, st, table, 4)
	srv := tsdbServer(t, st, table, Limits{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, filepath.Join("testdata", "pyopentsdb_client.py"), srv.URL,
		strconv.FormatInt(sec0, 10), strconv.FormatInt(sec1, 10))
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("pyopentsdb client: %v\n%s", err, stderr)
	}
	var got struct {
		Version      map[string]string `json:"version"`
		Aggregators  []string          `json:"aggregators"`
		Filters      []string          `json:"filters"`
		Metrics      []string          `json:"metrics"`
		SuggestTagv  []string          `json:"suggest_tagv"`
		QueryFilters []struct {
			Metric string             `json:"metric"`
			Tags   map[string]string  `json:"tags"`
			DPS    map[string]float64 `json:"dps"`
			Query  struct {
				Index int `json:"index"`
			} `json:"query"`
		} `json:"query_filters"`
		QueryTags []struct {
			Tags map[string]string  `json:"tags"`
			DPS  map[string]float64 `json:"dps"`
		} `json:"query_tags"`
		Error *string `json:"error"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output: %v\n%s", err, out)
	}
	if got.Version["version"] != Version || len(got.Aggregators) != len(aggregatorNames()) || len(got.Filters) != len(filterDocs) {
		t.Fatalf("version, aggregators, filters: %v %v %v", got.Version, got.Aggregators, got.Filters)
	}
	if strings.Join(got.Metrics, " ") != "devices.hour.count devices.minute.count devices.minute.mean devices.minute.temp_q" ||
		strings.Join(got.SuggestTagv, " ") != "device-001 device-002" {
		t.Fatalf("metrics %v, tag values %v", got.Metrics, got.SuggestTagv)
	}
	qf := got.QueryFilters
	if len(qf) != 2 || qf[0].Tags["entity"] != "device-001" || qf[1].Tags["entity"] != "device-002" || len(qf[0].DPS) != 6 ||
		qf[0].DPS[strconv.FormatInt(sec0+600, 10)] != 155 || qf[1].Query.Index != 0 {
		t.Fatalf("filters query: %+v", qf)
	}
	qt := got.QueryTags
	if len(qt) != 2 || qt[0].Tags["quantile"] != "0.5" || qt[1].Tags["quantile"] != "0.95" || len(qt[1].DPS) != 60 ||
		qt[1].DPS[strconv.FormatInt(sec0, 10)] != 200 {
		t.Fatalf("tags query: %+v", qt)
	}
	if got.Error == nil || !strings.Contains(*got.Error, "No such name for 'metrics': 'devices.minute.nope'") {
		t.Fatalf("error as the client read it: %v", got.Error)
	}
}
