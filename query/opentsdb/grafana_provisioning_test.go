package opentsdb

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// TestGrafanaProvisioning checks that deploy/grafana and docker-compose.yml fit together: the data
// source is an OpenTSDB one in 2.3 or 2.4 mode pointing at the compose query service's port, the
// dashboard provider reads where compose mounts the dashboards, and every dashboard query and
// variable uses the provisioned data source. (TestDemo in app runs the dashboard's queries.)
func TestGrafanaProvisioning(t *testing.T) {
	read := func(parts ...string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(append([]string{"..", ".."}, parts...)...))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var dsFile struct {
		Datasources []struct {
			Name, UID, Type, Access, URL string
			JSONData                     struct {
				TSDBVersion    int `yaml:"tsdbVersion"`
				TSDBResolution int `yaml:"tsdbResolution"`
				LookupLimit    int `yaml:"lookupLimit"`
			} `yaml:"jsonData"`
		}
	}
	if err := yaml.Unmarshal(read("deploy", "grafana", "provisioning", "datasources", "abacus.yaml"), &dsFile); err != nil {
		t.Fatal(err)
	}
	if len(dsFile.Datasources) != 1 {
		t.Fatalf("data sources: %+v", dsFile.Datasources)
	}
	ds := dsFile.Datasources[0]
	if ds.Type != "opentsdb" || ds.Access != "proxy" || (ds.JSONData.TSDBVersion != 3 && ds.JSONData.TSDBVersion != 4) ||
		ds.JSONData.TSDBResolution != 1 || ds.JSONData.LookupLimit < 1 || ds.JSONData.LookupLimit > 1000 {
		t.Fatalf("data source: %+v", ds)
	}
	var compose struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Environment map[string]string `yaml:"environment"`
			Volumes     []string          `yaml:"volumes"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(read("docker-compose.yml"), &compose); err != nil {
		t.Fatal(err)
	}
	listen := compose.Services["query"].Environment["ABACUS_LISTEN"]
	if _, port, _ := strings.Cut(listen, ":"); ds.URL != "http://query:"+port {
		t.Fatalf("data source URL %s, query service listens on %s", ds.URL, listen)
	}
	g := compose.Services["grafana"]
	if !strings.HasPrefix(g.Image, "grafana/grafana:") || strings.HasSuffix(g.Image, ":latest") {
		t.Fatalf("grafana image %q: want a pinned grafana/grafana", g.Image)
	}
	mounts := map[string]string{}
	for _, v := range g.Volumes {
		parts := strings.Split(v, ":")
		mounts[parts[1]] = parts[0]
		if _, err := os.Stat(filepath.Join("..", "..", parts[0])); err != nil {
			t.Fatalf("grafana mounts %s: %v", parts[0], err)
		}
	}
	var providers struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	if err := yaml.Unmarshal(read("deploy", "grafana", "provisioning", "dashboards", "abacus.yaml"), &providers); err != nil {
		t.Fatal(err)
	}
	if mounts["/etc/grafana/provisioning"] != "./deploy/grafana/provisioning" || len(providers.Providers) != 1 ||
		mounts[providers.Providers[0].Options.Path] != "./deploy/grafana/dashboards" {
		t.Fatalf("grafana mounts %v, dashboard provider %+v", mounts, providers)
	}
	// Every data source reference in the dashboard is the provisioned one.
	var walk func(v any)
	refs := 0
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if d, ok := v["datasource"].(map[string]any); ok {
				refs++
				if d["type"] != "opentsdb" || d["uid"] != ds.UID {
					t.Fatalf("dashboard data source %v, want opentsdb %s", d, ds.UID)
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	var dash any
	if err := json.Unmarshal(read("deploy", "grafana", "dashboards", "devices.json"), &dash); err != nil {
		t.Fatal(err)
	}
	if walk(dash); refs < 10 {
		t.Fatalf("dashboard: %d data source references", refs)
	}
}
