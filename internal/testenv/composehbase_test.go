package testenv_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/testenv/gate"
)

// dockerfile is what TestComposeHBaseImageServes reads of a Dockerfile's last stage: what it
// copies from the build context (image path -> context path), what it copies from an earlier
// stage (image paths) and its ENTRYPOINT.
type dockerfile struct {
	fromContext map[string]string
	fromStage   []string
	entrypoint  []string
}

// readDockerfile reads the COPY and ENTRYPOINT lines of path's last stage. It knows only the
// forms deploy/hbase/Dockerfile uses, and fails on others rather than guess.
func readDockerfile(t *testing.T, path string) dockerfile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var d dockerfile
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		word, rest, _ := strings.Cut(line, " ")
		switch strings.ToUpper(word) {
		case "FROM": // a new stage: only the last one runs
			d = dockerfile{fromContext: map[string]string{}}
		case "COPY":
			args := strings.Fields(rest)
			if len(args) == 3 && strings.HasPrefix(args[0], "--from=") {
				d.fromStage = append(d.fromStage, args[2])
				continue
			}
			if len(args) != 2 {
				t.Fatalf("%s: COPY %s: want one source and one destination", path, rest)
			}
			d.fromContext[args[1]] = args[0]
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &d.entrypoint); err != nil {
				t.Fatalf("%s: ENTRYPOINT must be a JSON list (exec form): %v", path, err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(d.entrypoint) == 0 {
		t.Fatalf("%s: no ENTRYPOINT in the last stage", path)
	}
	return d
}

// TestComposeHBaseImageServes runs the compose HBase image's command (deploy/hbase/Dockerfile)
// outside Docker: its ENTRYPOINT as written, with each path the image copies from the repository
// replaced by that file here, the jars it resolves from testenv/hbase/pom.xml replaced by the
// same jars resolved by testenv/services.sh, and its settings from the environment. It must
// start, and abacus's client must create a table, write and read through it, as compose's
// services do. What Docker alone adds (the base images, the network) is not tried here.
func TestComposeHBaseImageServes(t *testing.T) {
	root := filepath.Dir(filepath.Dir(gate.ServicesScript(t)))
	if gate.NoServices() {
		gate.Unavailable(t, "the HBase jars and a JVM: "+gate.EnvNoServices+"=1")
	}
	jars, err := os.ReadFile(filepath.Join(root, "testenv", ".data", "hbase.classpath"))
	if err != nil {
		gate.Unavailable(t, "the HBase jars are not resolved: run testenv/services.sh fetch: "+err.Error())
	}
	if _, err := exec.LookPath("java"); err != nil {
		gate.Unavailable(t, "no java: "+err.Error())
	}

	d := readDockerfile(t, filepath.Join(root, "deploy", "hbase", "Dockerfile"))
	if len(d.fromStage) != 1 {
		t.Fatalf("the image copies %v from its build stage; the test knows one folder of jars", d.fromStage)
	}
	// The jar stage resolves testenv/hbase/pom.xml, the file the tests' HBase comes from: checked
	// by the build stage's COPY line.
	src, err := os.ReadFile(filepath.Join(root, "deploy", "hbase", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(src, []byte("COPY testenv/hbase/pom.xml ")) {
		t.Error("deploy/hbase/Dockerfile does not resolve its jars from testenv/hbase/pom.xml: the compose HBase may not be the tested one")
	}

	home := t.TempDir()
	local := map[string]string{d.fromStage[0] + "/*": strings.TrimSpace(string(jars))}
	for dst, from := range d.fromContext {
		local[dst] = filepath.Join(root, from)
	}
	// Longest image path first, so that /opt/hbase/conf is mapped before /opt/hbase.
	paths := slices.Collect(func(yield func(string) bool) {
		for p := range local {
			if !yield(p) {
				return
			}
		}
	})
	slices.SortFunc(paths, func(a, b string) int { return len(b) - len(a) })
	mapPath := func(s string) string {
		for _, p := range paths {
			s = strings.ReplaceAll(s, p, local[p])
		}
		return strings.ReplaceAll(s, "/opt/hbase", home) // hbase.home.dir: nothing is read there
	}
	var args []string
	for _, a := range d.entrypoint {
		args = append(args, mapPath(a))
	}
	for _, a := range args {
		if strings.Contains(a, "/opt/") || strings.Contains(a, "/var/lib/") {
			t.Fatalf("ENTRYPOINT argument %q names an image path the test cannot map", a)
		}
	}

	const zk, master, rs = "28181", "28000", "28020" // below 32768, used by no other stage
	logPath := filepath.Join(home, "hbase.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "HBASE_HOSTNAME=127.0.0.1", "HBASE_ZK_PORT="+zk,
		"HBASE_MASTER_PORT="+master, "HBASE_RS_PORT="+rs, "HBASE_DATA_DIR="+filepath.Join(home, "data"))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	fail := func(format string, a ...any) {
		t.Helper()
		out, _ := os.ReadFile(logPath)
		if len(out) > 6000 {
			out = out[len(out)-6000:]
		}
		t.Fatalf(format+"\n--- end of the HBase log:\n%s", append(a, out)...)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var cl *hbase.Client
	for cl == nil {
		try, cancelTry := context.WithTimeout(ctx, 10*time.Second)
		c, err := hbase.NewClient(try, hbase.Config{ZooKeeper: "127.0.0.1:" + zk})
		if err == nil {
			if _, err = c.Admin().ListTables(try, ""); err == nil {
				cancelTry()
				cl = c
				break
			}
			c.Close()
		}
		cancelTry()
		select {
		case werr := <-exited:
			exited <- werr
			fail("the image's command exited (%v) before HBase answered: %v", werr, err)
		case <-ctx.Done():
			fail("HBase from the image's command did not answer in time: %v", err)
		case <-time.After(2 * time.Second):
		}
	}
	defer cl.Close()

	const table = "compose_image_check"
	if err := cl.Admin().CreateTable(ctx, hbase.TableSpec{Name: table, Families: []hbase.FamilySpec{{Name: "f"}}}); err != nil {
		fail("create table: %v", err)
	}
	if err := cl.Apply(ctx, []*hbase.Mutation{hbase.NewPut(table, []byte("row")).Add("f", []byte("q"), 1000, []byte("v"))}); err != nil {
		fail("put: %v", err)
	}
	res, err := cl.Get(ctx, hbase.Get{Table: table, Row: []byte("row")})
	if err != nil {
		fail("get: %v", err)
	}
	if v, ok := res.Value("f", "q"); !ok || string(v) != "v" {
		fail("read back %q (found %v), want \"v\"", v, ok)
	}
	// Its data went where HBASE_DATA_DIR says, the image's volume.
	if _, err := os.Stat(filepath.Join(home, "data", "root", "data", "default", table)); err != nil {
		fail("the table is not under HBASE_DATA_DIR: %v", err)
	}
}
