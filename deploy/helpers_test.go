package deploy_test

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/abacus-stream/abacus/app"
	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/topology"
	"github.com/twmb/franz-go/pkg/kgo"
)

// program has the topologies of the abacus binary the Dockerfile builds (cmd/abacus), which a
// test cannot import (package main): the deployment files run that binary.
var program = app.Program{Topologies: []func() (*topology.Topology, error){devices.Topology},
	// cmd/abacus has the devices generator (abacus generate); the checks only parse command lines.
	DemoGenerator: func(context.Context, *kgo.Client) error { return nil }}

// root is the repository's root, where docker-compose.yml and the Dockerfile are.
const root = ".."

// image is what the Dockerfile puts in the abacus image: its entrypoint and the repository files
// it copies, by their path in the image.
type image struct {
	entrypoint string
	files      map[string]string // path in the image -> path in the repository
	dirs       []string          // folders the image has (created for volumes to mount on)
}

// readDockerfile reads the Dockerfile's final stage: enough of the format for this project's
// Dockerfile (COPY of repository files, COPY --from of the build stage, ENTRYPOINT in exec form),
// and a failure on anything it would misread.
func readDockerfile(t *testing.T) image {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stage []string // the lines of the last stage: only it is the image
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if w := strings.Fields(sc.Text()); len(w) > 0 && strings.EqualFold(w[0], "FROM") {
			stage = nil
		}
		stage = append(stage, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	img := image{files: map[string]string{}}
	for _, line := range stage {
		words := strings.Fields(line)
		if len(words) == 0 || strings.HasPrefix(words[0], "#") {
			continue
		}
		switch strings.ToUpper(words[0]) {
		case "COPY":
			args := words[1:]
			from := false
			for len(args) > 0 && strings.HasPrefix(args[0], "--") {
				from = from || strings.HasPrefix(args[0], "--from=")
				args = args[1:]
			}
			if len(args) != 2 {
				t.Fatalf("Dockerfile: %q: want COPY [--flags] SRC DST", line)
			}
			if from {
				if strings.HasSuffix(args[1], "/") {
					img.dirs = append(img.dirs, strings.TrimSuffix(args[1], "/"))
				}
				continue
			}
			img.files[args[1]] = filepath.Join(root, args[0])
		case "ENTRYPOINT":
			var ep []string
			rest := strings.TrimSpace(strings.TrimPrefix(line, words[0]))
			if !strings.HasPrefix(rest, "[") {
				t.Fatalf("Dockerfile: ENTRYPOINT %s: want the exec form", rest)
			}
			for _, w := range strings.Split(strings.Trim(rest, "[]"), ",") {
				ep = append(ep, strings.Trim(strings.TrimSpace(w), `"`))
			}
			img.entrypoint = strings.Join(ep, " ")
		}
	}
	if img.entrypoint != "/abacus" {
		t.Fatalf("Dockerfile: entrypoint %q, want /abacus: the checks below read the command as abacus's arguments", img.entrypoint)
	}
	return img
}

// checkEnvRead fails for every ABACUS_* variable of env that the config does not read: a
// misspelt or retired variable is otherwise ignored in silence.
func checkEnvRead(t *testing.T, where string, names []string) {
	t.Helper()
	read := app.EnvVars()
	for _, n := range names {
		if strings.HasPrefix(n, "ABACUS_") && !slices.Contains(read, n) {
			t.Errorf("%s sets %s, which abacus does not read (it reads %s)", where, n, strings.Join(read, ", "))
		}
	}
}

// hostPort splits a listen address, the port as a number.
func hostPort(t *testing.T, addr string) (string, int) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	return h, n
}

// loopback reports whether a listen host is reachable only from inside its own container or pod.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// under reports whether path is dir or inside it.
func under(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
