package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// pkg is what one package of the module declares: its top-level names, and the fields and
// methods of each of its types.
type pkg struct {
	dir     string
	doc     bool // a file of it has a package doc comment
	names   map[string]bool
	members map[string]map[string]bool // type -> field and method names
}

// module is every package of the repository (deploy/ included), by package name: a short name
// may stand for several directories.
type module struct {
	root   string
	byName map[string][]*pkg
	byDir  map[string]*pkg
}

// root is the repository's top directory.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: %v", dir, err)
	}
	return dir
}

// skipDir says which directories hold no code of the project's own.
func skipDir(rel string) bool {
	base := filepath.Base(rel)
	return strings.HasPrefix(base, ".") || base == "testdata" || base == "node_modules" || rel == "testenv/.data"
}

// load parses every Go file of the repository, comments included.
func load(t *testing.T, rootDir string) (*module, map[string]*ast.File, *token.FileSet) {
	t.Helper()
	m := &module{root: rootDir, byName: map[string][]*pkg{}, byDir: map[string]*pkg{}}
	files := map[string]*ast.File{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(rootDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(rootDir, path)
		if d.IsDir() {
			if rel != "." && skipDir(rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		files[rel] = f
		dir := filepath.Dir(rel)
		name := f.Name.Name
		if strings.HasSuffix(f.Name.Name, "_test") {
			name = strings.TrimSuffix(name, "_test")
		}
		p := m.byDir[dir+"\x00"+name]
		if p == nil {
			p = &pkg{dir: dir, names: map[string]bool{}, members: map[string]map[string]bool{}}
			m.byDir[dir+"\x00"+name] = p
			m.byName[name] = append(m.byName[name], p)
		}
		p.declare(f)
		p.doc = p.doc || (f.Doc != nil && !strings.HasSuffix(path, "_test.go")) // what go doc shows
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m, files, fset
}

// declare adds what f declares to p.
func (p *pkg) declare(f *ast.File) {
	member := func(typ, name string) {
		if p.members[typ] == nil {
			p.members[typ] = map[string]bool{}
		}
		p.members[typ][name] = true
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil || len(d.Recv.List) == 0 {
				p.names[d.Name.Name] = true
				continue
			}
			member(receiverType(d.Recv.List[0].Type), d.Name.Name)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					p.names[s.Name.Name] = true
					member(s.Name.Name, "") // the type exists, even with no members
					if st, ok := s.Type.(*ast.StructType); ok {
						for _, f := range st.Fields.List {
							for _, n := range f.Names {
								member(s.Name.Name, n.Name)
							}
							if len(f.Names) == 0 { // embedded: its name is its type's
								member(s.Name.Name, receiverType(f.Type))
							}
						}
					}
					if it, ok := s.Type.(*ast.InterfaceType); ok {
						for _, f := range it.Methods.List {
							for _, n := range f.Names {
								member(s.Name.Name, n.Name)
							}
						}
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						p.names[n.Name] = true
					}
				}
			}
		}
	}
}

// receiverType is the name of a receiver's (or embedded field's) type.
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.SelectorExpr:
			return x.Sel.Name
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// resolve reports whether pkgName.name (and .member, when given) is declared by a package of
// that name; known says whether the module has a package of that name at all.
func (m *module) resolve(pkgName, name, member string) (ok, known bool) {
	for _, p := range m.byName[pkgName] {
		known = true
		if !p.names[name] {
			continue
		}
		if member == "" || p.members[name] == nil || p.members[name][member] {
			return true, true
		}
		// A member of a type that embeds another's: accept any type's member of that package,
		// rather than follow embedding.
		for _, ms := range p.members {
			if ms[member] {
				return true, true
			}
		}
	}
	return false, known
}

// dirPkg is the package of a module directory ("internal/plan"), or nil.
func (m *module) dirPkgs(dir string) []*pkg {
	var out []*pkg
	for _, ps := range m.byName {
		for _, p := range ps {
			if p.dir == dir {
				out = append(out, p)
			}
		}
	}
	return out
}

// Names in comments: a package of the module, a dot, an exported name, and maybe a member.
var commentRef = regexp.MustCompile(`(?:^|[^\w./-])([a-z][a-z0-9]*)\.([A-Z]\w*)(?:\.([A-Za-z]\w*))?`)

// Names in the docs, inside backquotes: a package (short or as a path), a name, maybe a member;
// or a file of the repository.
var (
	codeSpan = regexp.MustCompile("`([^`\n]+)`")
	docRef   = regexp.MustCompile(`^([a-z][a-z0-9/]*)\.([A-Z]\w*)(?:\.([A-Za-z]\w*))?(?:\(.*\))?$`)
	// A Go name alone, in CamelCase: a type or function of ours, unless the module declares no
	// such name anywhere (names of other projects are written with their package).
	bareName = regexp.MustCompile(`^[A-Z][a-z0-9]+[A-Z]\w*(\(\))?$`)
	fileRef  = regexp.MustCompile(`^([\w.-]+/)+[\w.-]+\.(go|sh|yaml|yml|md|js|json|py|java|xml|toml)$`)
)

// A reference that does not resolve, with its place.
type stale struct{ where, ref string }

// TestNamesInDocsExist: every pkg.Name in a comment of the code, every `pkg.Name` and every
// `path/to/file.go` in README.md and docs/ names something that exists.
func TestNamesInDocsExist(t *testing.T) {
	rootDir := root(t)
	m, files, fset := load(t, rootDir)
	var bad []stale

	for rel, f := range files {
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				for _, sm := range commentRef.FindAllStringSubmatch(c.Text, -1) {
					if ok, known := m.resolve(sm[1], sm[2], sm[3]); known && !ok {
						pos := fset.Position(c.Pos())
						bad = append(bad, stale{rel + ":" + itoa(pos.Line), strings.TrimLeft(sm[0], " (\"'[`")})
					}
				}
			}
		}
	}

	docs, _ := filepath.Glob(filepath.Join(rootDir, "docs", "*.md"))
	docs = append(docs, filepath.Join(rootDir, "README.md"))
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(rootDir, doc)
		for i, line := range strings.Split(string(b), "\n") {
			for _, sm := range codeSpan.FindAllStringSubmatch(line, -1) {
				if r := checkDocRef(m, rootDir, sm[1]); r != "" {
					bad = append(bad, stale{rel + ":" + itoa(i+1), r})
				}
			}
		}
	}

	sort.Slice(bad, func(i, j int) bool { return bad[i].where < bad[j].where })
	for _, b := range bad {
		t.Errorf("%s: %s names nothing that exists", b.where, b.ref)
	}
}

// checkDocRef returns the part of a code span of the docs that names nothing, or "".
func checkDocRef(m *module, rootDir, span string) string {
	span = strings.TrimSpace(span)
	if fileRef.MatchString(span) {
		if _, err := os.Stat(filepath.Join(rootDir, span)); err != nil && isModuleDir(rootDir, span) {
			return span
		}
		return ""
	}
	if bareName.MatchString(span) {
		if n := strings.TrimSuffix(span, "()"); !m.declares(n) && external[n] == "" {
			return span
		}
		return ""
	}
	sm := docRef.FindStringSubmatch(span)
	if sm == nil {
		return ""
	}
	pkgPath, name, member := sm[1], sm[2], sm[3]
	if strings.Contains(pkgPath, "/") {
		ps := m.dirPkgs(pkgPath)
		if len(ps) == 0 {
			if _, err := os.Stat(filepath.Join(rootDir, pkgPath)); err != nil && isModuleDir(rootDir, pkgPath) {
				return span
			}
			return ""
		}
		for _, p := range ps {
			if p.names[name] && (member == "" || p.members[name] == nil || p.members[name][member] || anyMember(p, member)) {
				return ""
			}
		}
		return span
	}
	if ok, known := m.resolve(pkgPath, name, member); known && !ok {
		return span
	}
	return ""
}

// isModuleDir says whether a path's first element is a directory of the repository: a path
// under one that no longer exists is stale; one outside it (a Java package) is not ours.
func isModuleDir(rootDir, path string) bool {
	first, _, _ := strings.Cut(path, "/")
	st, err := os.Stat(filepath.Join(rootDir, first))
	return err == nil && st.IsDir()
}

// external are names of other projects the docs write alone, and whose they are.
var external = map[string]string{
	"BufferedMutator":      "HBase's Java client",
	"NotServingRegion":     "HBase's NotServingRegionException",
	"RegionMovedException": "HBase",
}

// declares says whether any package of the module declares name, at top level or as a member.
func (m *module) declares(name string) bool {
	for _, ps := range m.byName {
		for _, p := range ps {
			if p.names[name] || anyMember(p, name) {
				return true
			}
		}
	}
	return false
}

func anyMember(p *pkg, member string) bool {
	for _, ms := range p.members {
		if ms[member] {
			return true
		}
	}
	return false
}

func itoa(n int) string {
	const digits = "0123456789"
	if n < 10 {
		return digits[n : n+1]
	}
	return itoa(n/10) + digits[n%10:n%10+1]
}

// TestLayoutListsEveryPackage: the README's Layout section names every package directory of the
// repository (as `dir` or `dir/`), so that a newcomer finds each package's one job there.
func TestLayoutListsEveryPackage(t *testing.T) {
	rootDir := root(t)
	m, _, _ := load(t, rootDir)
	b, err := os.ReadFile(filepath.Join(rootDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(b), "\n## Layout\n")
	if !ok {
		t.Fatal("README.md has no ## Layout section")
	}
	if end := strings.Index(layout, "\n## "); end >= 0 {
		layout = layout[:end]
	}
	named := map[string]bool{}
	for _, sm := range codeSpan.FindAllStringSubmatch(layout, -1) {
		named[strings.TrimSuffix(sm[1], "/")] = true
	}
	dirs := map[string]bool{}
	for _, p := range m.byDir {
		dirs[filepath.ToSlash(p.dir)] = true
	}
	var missing []string
	for d := range dirs {
		if d == "." || named[d] || underNamed(d, named) {
			continue
		}
		missing = append(missing, d)
	}
	sort.Strings(missing)
	for _, d := range missing {
		t.Errorf("README.md's Layout section does not name %s/ (nor a folder above it)", d)
	}
}

// underNamed says whether a folder above dir is named, and is one of the folders whose
// subfolders the table describes as a whole (bench/, deploy/, testenv/, examples/ and
// cmd/ are: each holds programs or checks rather than packages others import).
func underNamed(dir string, named map[string]bool) bool {
	for _, whole := range []string{"bench", "deploy", "testenv", "cmd", "internal/testenv", "internal/chaos"} {
		if (dir == whole || strings.HasPrefix(dir, whole+"/")) && named[whole] {
			return true
		}
	}
	return false
}

// TestEveryPackageHasDoc: go doc of every package says what its one job is.
func TestEveryPackageHasDoc(t *testing.T) {
	m, _, _ := load(t, root(t))
	for _, p := range m.byDir {
		if !p.doc {
			t.Errorf("package in %s/ has no package doc comment (// Package ... before its package clause)", p.dir)
		}
	}
}
