package deploy_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/abacus-stream/abacus/app"
	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"sigs.k8s.io/yaml"
)

// loadCompose loads docker-compose.yml as `docker compose` does, schema validation included.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	details := types.ConfigDetails{
		WorkingDir:  abs,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(abs, "docker-compose.yml")}},
		Environment: types.Mapping{},
	}
	p, err := loader.LoadWithContext(context.Background(), details, func(o *loader.Options) {
		o.SetProjectName("abacus", true)
		o.ResolvePaths = true
	})
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return p
}

// abacusService is a compose service that runs the abacus image, with what it runs.
type abacusService struct {
	name string
	svc  types.ServiceConfig
	inv  *app.Invocation
	cfg  *app.Config
}

// abacusServices reads every service built from the Dockerfile: its command line parsed by the
// CLI's own flag parsing, its config resolved from the file its -config names in the image (or a
// volume), its environment and its flags, as the process in the container would.
func abacusServices(t *testing.T, p *types.Project, img image) []abacusService {
	t.Helper()
	abs, _ := filepath.Abs(root)
	var out []abacusService
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range p.Services {
			if !yield(n) {
				return
			}
		}
	}) {
		svc := p.Services[name]
		if svc.Build == nil || svc.Build.Dockerfile == "deploy/hbase/Dockerfile" {
			continue // an image of its own, or the HBase one (TestComposeRunsTheTestedVersions)
		}
		if svc.Build.Context != abs || (svc.Build.Dockerfile != "" && svc.Build.Dockerfile != "Dockerfile") {
			t.Errorf("service %s builds %s, not the repository's Dockerfile", name, svc.Build.Context)
			continue
		}
		if len(svc.Entrypoint) > 0 {
			t.Errorf("service %s replaces the image's entrypoint: the checks read its command as abacus's arguments", name)
			continue
		}
		where := "docker-compose.yml service " + name
		inv, err := program.ParseCommandLine(svc.Command)
		if err != nil {
			t.Errorf("%s: command %q: %v", where, []string(svc.Command), err)
			continue
		}
		env := map[string]string{}
		var names []string
		for k, v := range svc.Environment {
			names = append(names, k)
			if v != nil {
				env[k] = *v
			}
		}
		checkEnvRead(t, where, names)
		var file []byte
		if path := inv.Flags["config"]; path != "" {
			src, ok := img.files[path]
			for _, v := range svc.Volumes {
				if v.Type == types.VolumeTypeBind && under(path, v.Target) {
					src, ok = filepath.Join(v.Source, strings.TrimPrefix(path, v.Target)), true
				}
			}
			if !ok {
				t.Errorf("%s: -config %s is neither in the image (Dockerfile COPY) nor on a bind mount", where, path)
				continue
			}
			if file, err = os.ReadFile(src); err != nil {
				t.Errorf("%s: -config %s: %v", where, path, err)
				continue
			}
		}
		cfg, err := program.ResolveConfig(inv, file, func(n string) (string, bool) { v, ok := env[n]; return v, ok })
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		out = append(out, abacusService{name: name, svc: svc, inv: inv, cfg: cfg})
	}
	return out
}

// TestComposeFile loads docker-compose.yml with compose-spec's loader and checks it against
// abacus itself: commands the CLI accepts, ABACUS_* variables the config reads, published ports
// that are the services' listeners, the processor's state on a volume, and Grafana's data source
// pointing at the query service.
func TestComposeFile(t *testing.T) {
	p := loadCompose(t)
	img := readDockerfile(t)
	services := abacusServices(t, p, img)
	if len(services) == 0 {
		t.Fatal("no service runs the abacus image")
	}
	roles := map[string]string{}  // role -> a service that runs it
	queryPort := map[string]int{} // service -> the port its query server listens on
	for _, s := range services {
		where := "docker-compose.yml service " + s.name
		for _, r := range s.inv.Roles {
			roles[r] = s.name
		}
		listeners := map[int]string{}
		if ops := s.cfg.OpsListenAddr(s.inv.Roles); ops != "" && len(s.inv.Roles) > 0 {
			h, port := hostPort(t, ops)
			listeners[port] = h
		}
		if slices.Contains(s.inv.Roles, app.RoleQuery) {
			h, port := hostPort(t, s.cfg.Query.Listen)
			listeners[port] = h
			queryPort[s.name] = port
			if loopback(h) {
				t.Errorf("%s: the query server listens on %s, which no other container (Grafana) reaches: set ABACUS_LISTEN to 0.0.0.0:%d", where, s.cfg.Query.Listen, port)
			}
		}
		for _, pc := range s.svc.Ports {
			host, ok := listeners[int(pc.Target)]
			switch {
			case !ok:
				t.Errorf("%s publishes container port %d, where abacus listens on nothing (its listeners: %v)", where, pc.Target, listeners)
			case loopback(host):
				t.Errorf("%s publishes container port %d, but abacus listens there on %s only: the published port reaches nothing", where, pc.Target, host)
			}
		}
		if slices.Contains(s.inv.Roles, app.RoleProcessor) {
			onVolume := false
			for _, v := range s.svc.Volumes {
				if v.Type == types.VolumeTypeVolume && under(s.cfg.Processor.StoragePath, v.Target) {
					onVolume = true
					if !slices.ContainsFunc(img.dirs, func(d string) bool { return v.Target == d || under(v.Target, d) }) {
						t.Errorf("%s mounts volume %s on %s, a folder the image lacks: Docker creates it owned by root, and the image's nonroot user cannot write its state there", where, v.Source, v.Target)
					}
				}
			}
			if !onVolume {
				t.Errorf("%s keeps processor.storage_path %s outside any volume: a recreated container restores all its state from the changelog", where, s.cfg.Processor.StoragePath)
			}
		}
	}
	var admin string
	for _, s := range services {
		if s.inv.Command == "admin create" {
			admin = s.name
		}
	}
	if admin == "" {
		t.Error("no service of docker-compose.yml runs abacus admin create: the roles would wait for topics and tables nobody makes")
	}
	for _, s := range services {
		if len(s.inv.Roles) == 0 || admin == "" {
			continue
		}
		if dep, ok := s.svc.DependsOn[admin]; !ok || dep.Condition != types.ServiceConditionCompletedSuccessfully {
			t.Errorf("docker-compose.yml service %s does not wait for %s to complete (depends_on: %s: {condition: %s})", s.name, admin, admin, types.ServiceConditionCompletedSuccessfully)
		}
	}
	for _, r := range app.RoleNames() {
		if roles[r] == "" {
			t.Errorf("no service of docker-compose.yml runs the %s role", r)
		}
	}
	checkGrafanaDatasource(t, p, queryPort)
}

// checkGrafanaDatasource checks that the data sources Grafana is provisioned with reach a query
// service of the compose file, at the port it listens on.
func checkGrafanaDatasource(t *testing.T, p *types.Project, queryPort map[string]int) {
	t.Helper()
	g, ok := p.Services["grafana"]
	if !ok {
		t.Fatal("docker-compose.yml has no grafana service")
	}
	var dir string
	for _, v := range g.Volumes {
		if v.Type == types.VolumeTypeBind && v.Target == "/etc/grafana/provisioning" {
			dir = v.Source
		}
	}
	if dir == "" {
		t.Fatal("grafana: no bind mount on /etc/grafana/provisioning")
	}
	files, err := filepath.Glob(filepath.Join(dir, "datasources", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("grafana: no data source file in %s/datasources: %v", dir, err)
	}
	n := 0
	for _, f := range files {
		for _, ds := range readDatasources(t, f) {
			if ds.Type != "opentsdb" {
				continue
			}
			n++
			u, err := url.Parse(ds.URL)
			if err != nil {
				t.Errorf("%s: data source %s: %v", f, ds.Name, err)
				continue
			}
			port, _ := strconv.Atoi(u.Port())
			want, ok := queryPort[u.Hostname()]
			switch {
			case !ok:
				t.Errorf("%s: data source %s points at %s, which is no query service of docker-compose.yml (those: %v)", f, ds.Name, u.Host, queryPort)
			case port != want:
				t.Errorf("%s: data source %s points at port %d; service %s's query server listens on %d", f, ds.Name, port, u.Hostname(), want)
			}
			if !slices.Contains(g.GetDependencies(), u.Hostname()) {
				t.Errorf("grafana does not depend on %s, its data source's service", u.Hostname())
			}
		}
	}
	if n == 0 {
		t.Error("grafana is provisioned with no OpenTSDB data source: the dashboards chart nothing")
	}
}

// datasource is the part of a Grafana provisioned data source the checks read.
type datasource struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
	Type string `json:"type"`
	URL  string `json:"url"`
}

// readDatasources reads a Grafana data source provisioning file.
func readDatasources(t *testing.T, path string) []datasource {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Datasources []datasource `json:"datasources"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f.Datasources
}

// TestComposeRunsTheTestedVersions: the compose file's Kafka is the version the tests run
// (testenv/kafka/pom.xml), its HBase is built from the jars the tests run (testenv/hbase/pom.xml),
// and the image build leaves out the test services' data.
func TestComposeRunsTheTestedVersions(t *testing.T) {
	pom, err := os.ReadFile(filepath.Join(root, "testenv", "kafka", "pom.xml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`<kafka.version>([^<]+)</kafka.version>`).FindSubmatch(pom)
	if m == nil {
		t.Fatal("testenv/kafka/pom.xml names no kafka.version")
	}
	p := loadCompose(t)
	if got, want := p.Services["kafka"].Image, "apache/kafka:"+string(m[1]); got != want {
		t.Errorf("docker-compose.yml runs %s; the tests run %s", got, want)
	}
	// HBase: built from the jars the tests' HBase comes from (internal/testenv's
	// TestComposeHBaseImageServes runs the image's command).
	hb := p.Services["hbase"]
	if hb.Build == nil || hb.Build.Dockerfile != "deploy/hbase/Dockerfile" {
		t.Errorf("docker-compose.yml's hbase is %q, build %+v: want it built from deploy/hbase/Dockerfile, the tested HBase", hb.Image, hb.Build)
	} else {
		df, err := os.ReadFile(filepath.Join(root, "deploy", "hbase", "Dockerfile"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(df), "COPY testenv/hbase/pom.xml ") {
			t.Error("deploy/hbase/Dockerfile does not resolve HBase from testenv/hbase/pom.xml")
		}
		if v := hb.Environment["HBASE_HOSTNAME"]; v == nil || *v != "hbase" {
			t.Errorf("hbase's HBASE_HOSTNAME is %v: the master and region server must tell other containers a name they resolve (the service's, hbase)", v)
		}
	}
	ignore, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatalf("no .dockerignore: the build context takes testenv/.data (hundreds of MB): %v", err)
	}
	if !slices.Contains(strings.Fields(string(ignore)), "testenv/.data") {
		t.Error(".dockerignore leaves testenv/.data in the build context")
	}
}
