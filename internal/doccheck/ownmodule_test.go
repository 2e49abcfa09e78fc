package doccheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestOwnModuleBuilds follows the README's "Build your binary" as a newcomer would: a module of
// their own beside a clone of abacus, the README's main.go in it, then the README's shell lines,
// run as written but for the clone's path. It fails when abacus cannot be used from another module
// (a replace directive in abacus's go.mod, which dependents do not see; an internal package in the
// example) or when the README's lines stop working.
func TestOwnModuleBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary from a module of its own")
	}
	rootDir := root(t)
	readme, err := os.ReadFile(filepath.Join(rootDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	const marker = "**Build your binary.**"
	i := strings.Index(text, marker)
	if i < 0 {
		t.Fatalf("README.md has no %q paragraph", marker)
	}
	section := text[i:]
	mainGo := fenced(t, section, "```go")
	lines := fenced(t, section, "```sh")
	if !strings.Contains(lines, "../abacus") {
		t.Fatalf("the README's lines do not build against a clone at ../abacus:\n%s", lines)
	}

	dir := filepath.Join(t.TempDir(), "fleet")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(mainGo), 0o644); err != nil {
		t.Fatal(err)
	}
	script := "set -e\n" + strings.ReplaceAll(lines, "../abacus", rootDir)
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = dir
	// The module's own GOFLAGS (e.g. -mod=vendor) are not the newcomer's.
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's lines failed (%v):\n%s\n--- output:\n%s", err, script, out)
	}
	if !strings.Contains(string(out), "abacus ") {
		t.Errorf("the built binary's version printed %q, not abacus's", out)
	}
}

// fenced returns the body of the first block fenced by open in text.
func fenced(t *testing.T, text, open string) string {
	t.Helper()
	i := strings.Index(text, open+"\n")
	if i < 0 {
		t.Fatalf("no %s block after the marker", open)
	}
	body := text[i+len(open)+1:]
	j := strings.Index(body, "```")
	if j < 0 {
		t.Fatalf("a %s block that is never closed", open)
	}
	return body[:j]
}
