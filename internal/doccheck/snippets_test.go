package doccheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// A snippet is one ```go block of a doc.
type snippet struct {
	doc  string // the doc's path from the repository's top ("README.md", "docs/QUERYING.md")
	line int    // the doc's line of the block's first line of code
	code string
}

// goBlocks are the ```go blocks of a doc, each with the line it starts on. A fence may be indented
// (a block inside a list item): the block's lines lose that indent.
func goBlocks(doc, text string) ([]snippet, error) {
	lines := strings.Split(text, "\n")
	var out []snippet
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```go" {
			continue
		}
		indent := lines[i][:len(lines[i])-len(strings.TrimLeft(lines[i], " "))]
		end := i + 1
		for end < len(lines) && strings.TrimSpace(lines[end]) != "```" {
			end++
		}
		if end == len(lines) {
			return nil, fmt.Errorf("%s:%d: a ```go block that is never closed", doc, i+1)
		}
		code := make([]string, 0, end-i-1)
		for _, l := range lines[i+1 : end] {
			code = append(code, strings.TrimPrefix(l, indent))
		}
		out = append(out, snippet{doc: doc, line: i + 2, code: strings.Join(code, "\n") + "\n"})
		i = end
	}
	return out, nil
}

// stdImports are the standard library packages a fragment may use without importing them, by
// name. A name missing here is not imported, and the fragment fails to compile saying so: add it.
var stdImports = map[string]string{
	"binary": "encoding/binary", "bytes": "bytes", "context": "context", "errors": "errors",
	"fmt": "fmt", "http": "net/http", "io": "io", "json": "encoding/json", "log": "log",
	"math": "math", "os": "os", "slices": "slices", "slog": "log/slog", "sort": "sort",
	"strconv": "strconv", "strings": "strings", "sync": "sync", "testing": "testing", "time": "time",
}

// moduleImports maps the name of each package of the abacus module to its import path, for the
// names that one directory alone declares (a name two directories share is left out: a fragment
// that needs one of them must be a whole file, with its imports), and adds stdImports.
func moduleImports(t *testing.T, rootDir string) map[string]string {
	t.Helper()
	mod, err := os.ReadFile(filepath.Join(rootDir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(mod), "\n")
	modPath := strings.TrimSpace(strings.TrimPrefix(first, "module"))
	m, _, _ := load(t, rootDir)
	out := map[string]string{}
	for name, ps := range m.byName {
		var dirs []string
		for _, p := range ps {
			dir := filepath.ToSlash(p.dir)
			if dir == "deploy" || strings.HasPrefix(dir, "deploy/") || strings.HasPrefix(dir, "testenv/tools") {
				continue // modules of their own
			}
			dirs = append(dirs, dir)
		}
		if name != "main" && len(dirs) == 1 {
			out[name] = modPath + "/" + dirs[0]
		}
	}
	for name, path := range stdImports {
		out[name] = path // the standard library's, should a package of ours share its name
	}
	return out
}

// source is the file a snippet is compiled as. A block that starts with a package clause is a
// whole file, compiled as it stands. Any other block is a fragment of top-level declarations,
// compiled in a package snippet, with an import added for every pkg.Name it uses whose pkg it does
// not declare itself (imports: the module's packages and stdImports). A //line directive before
// the block's code makes every error name the doc and its line.
func source(s snippet, imports map[string]string) ([]byte, error) {
	directive := fmt.Sprintf("//line %s:%d\n", s.doc, s.line)
	if wholeFile(s.code) {
		return []byte(directive + s.code), nil
	}
	const header = "package snippet\n"
	f, err := parser.ParseFile(token.NewFileSet(), "", header+s.code, 0)
	if err != nil {
		return nil, fmt.Errorf("%s:%d: not a Go file nor top-level declarations (%v)", s.doc, s.line, err)
	}
	unresolved := map[string]bool{}
	for _, id := range f.Unresolved {
		unresolved[id.Name] = true
	}
	need := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && unresolved[id.Name] {
				if path := imports[id.Name]; path != "" {
					need[path] = true
				}
			}
		}
		return true
	})
	paths := make([]string, 0, len(need))
	for p := range need {
		paths = append(paths, strconv.Quote(p))
	}
	sort.Strings(paths)
	var b bytes.Buffer
	b.WriteString(header)
	if len(paths) > 0 {
		fmt.Fprintf(&b, "\nimport (\n\t%s\n)\n", strings.Join(paths, "\n\t"))
	}
	b.WriteString(directive)
	b.WriteString(s.code)
	return b.Bytes(), nil
}

// wholeFile says whether code starts with a package clause (after comments, if any).
func wholeFile(code string) bool {
	_, err := parser.ParseFile(token.NewFileSet(), "", code, parser.PackageClauseOnly)
	return err == nil
}

// gofmted says whether a snippet is formatted as gofmt would (a fragment as the declarations of
// a file).
func gofmted(s snippet) bool {
	code := s.code
	if !wholeFile(code) {
		code = "package snippet\n\n" + code
	}
	out, err := format.Source([]byte(code))
	return err == nil && string(out) == code
}

// nonWord is what a snippet's package directory name replaces in its doc's path.
var nonWord = regexp.MustCompile(`\W`)

// compile builds the snippets, each as a package of its own, and returns go build's output when
// one fails. The packages live only in an overlay (go build -overlay), in directories under
// internal/doccheck/testdata that do not exist: nothing is written to the tree, and go build ./...
// never sees them.
func compile(t *testing.T, rootDir string, snippets []snippet, imports map[string]string) (string, error) {
	t.Helper()
	tmp := t.TempDir()
	replace := map[string]string{}
	var pkgs []string
	for i, s := range snippets {
		src, err := source(s, imports)
		if err != nil {
			return "", err
		}
		name := fmt.Sprintf("s%02d_%s_%d", i, nonWord.ReplaceAllString(s.doc, "_"), s.line)
		file := filepath.Join(tmp, name+".go")
		if err := os.WriteFile(file, src, 0o644); err != nil {
			t.Fatal(err)
		}
		rel := filepath.Join("internal", "doccheck", "testdata", "snippets", name)
		replace[filepath.Join(rootDir, rel, "snippet.go")] = file
		pkgs = append(pkgs, "./"+filepath.ToSlash(rel))
	}
	overlay, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to compile the docs' snippets: %v", err)
	}
	// Several packages are compiled and their results dropped; a single one may be a main package,
	// whose binary goes to tmp rather than the working directory.
	args := []string{"build", "-overlay", overlayFile}
	if len(pkgs) == 1 {
		args = append(args, "-o", filepath.Join(tmp, "bin"))
	}
	args = append(args, pkgs...)
	cmd := exec.Command(goTool, args...)
	cmd.Dir = rootDir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// docSnippets are the ```go blocks of README.md and docs/*.md.
func docSnippets(t *testing.T, rootDir string) []snippet {
	t.Helper()
	docs, _ := filepath.Glob(filepath.Join(rootDir, "docs", "*.md"))
	docs = append([]string{filepath.Join(rootDir, "README.md")}, docs...)
	var all []snippet
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(rootDir, doc)
		ss, err := goBlocks(filepath.ToSlash(rel), string(b))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, ss...)
	}
	return all
}

// TestGoSnippetsCompile: every ```go block of README.md and docs/*.md compiles against the
// module's packages as they are, and is gofmt'd, so that a renamed or removed API, or a snippet
// that was never right, fails the unit stage with the doc's line. See source for how a block
// becomes a file.
func TestGoSnippetsCompile(t *testing.T) {
	rootDir := root(t)
	snippets := docSnippets(t, rootDir)
	readme := 0
	for _, s := range snippets {
		if s.doc == "README.md" {
			readme++
		}
		if !gofmted(s) {
			t.Errorf("%s:%d: the snippet is not formatted as gofmt would", s.doc, s.line)
		}
	}
	if readme == 0 {
		t.Fatal("README.md has no ```go block: the snippets' check would check nothing")
	}
	if out, err := compile(t, rootDir, snippets, moduleImports(t, rootDir)); err != nil {
		t.Fatalf("a snippet of the docs does not compile (%v):\n%s", err, out)
	}
}

// TestSnippetCheckFails: the check fails, naming the doc's line, on a fragment that names an API
// that does not exist, and on a whole file that does, so that TestGoSnippetsCompile cannot pass
// by compiling nothing.
func TestSnippetCheckFails(t *testing.T) {
	rootDir := root(t)
	imports := moduleImports(t, rootDir)
	for _, s := range []snippet{
		{doc: "README.md", line: 40, code: "var r *query.Reader\n\nvar _ = r.NoSuchMethod\n"},
		{doc: "docs/X.md", line: 7, code: "package main\n\nimport \"github.com/abacus-stream/abacus/topology\"\n\nfunc main() { topology.NoSuchHelper() }\n"},
	} {
		out, err := compile(t, rootDir, []snippet{s}, imports)
		if err == nil {
			t.Errorf("%s:%d: a snippet naming an API that does not exist compiled", s.doc, s.line)
			continue
		}
		if want := regexp.MustCompile(regexp.QuoteMeta(s.doc) + `:\d+(:\d+)?: .*NoSuch`); !want.MatchString(out) {
			t.Errorf("go build's output does not name %s and the missing API:\n%s", s.doc, out)
		}
	}
}
