// Command testlog reads the `go test -json` files of a testenv/run-tests.sh run (written by
// gotestsum --jsonfile) for the two answers the test command needs from them:
//
//	testlog needs-services FILE...        the tests that skipped for want of a service
//	testlog slowest -n 10 STAGE=FILE...   the slowest tests of the run, with their stages
//
// needs-services prints "PACKAGE TEST" for each top-level test whose run (or a subtest's)
// skipped with gate.NoServicesMark: the unit stage runs every test without services, and the main
// stage then runs exactly these against the real servers, so that no test runs twice and none is
// left out. slowest prints the top-level tests of all the files, slowest first, one per line:
// seconds, stage, package, test and its result.
//
// It reads the files only; it never runs a test.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/abacus-stream/abacus/internal/testenv/gate"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent), the fields used here.
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// testKey names a top-level test.
type testKey struct{ pkg, test string }

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "needs-services":
		err = needsServices(os.Stdout, os.Args[2:])
	case "slowest":
		err = slowest(os.Stdout, os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testlog:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: testlog needs-services FILE... | testlog slowest [-n N] STAGE=FILE...")
	os.Exit(2)
}

// readEvents calls fn for every event of a `go test -json` file. Lines that are not JSON (a
// build failure's compiler output) are passed over: they name no test.
func readEvents(path string, fn func(event)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return scanEvents(f, fn)
}

func scanEvents(r io.Reader, fn func(event)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20) // a test's output line can be long
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var e event
		if json.Unmarshal(line, &e) != nil {
			continue
		}
		fn(e)
	}
	return sc.Err()
}

// topLevel is the top-level test a (sub)test belongs to.
func topLevel(test string) string {
	name, _, _ := strings.Cut(test, "/")
	return name
}

// needsServices prints the top-level tests skipped with gate.NoServicesMark, sorted.
func needsServices(w io.Writer, files []string) error {
	if len(files) == 0 {
		return errors.New("needs-services: name at least one file")
	}
	// A test's skip message comes in its output events before the skip event itself.
	marked := map[testKey]bool{}
	need := map[testKey]bool{}
	for _, path := range files {
		err := readEvents(path, func(e event) {
			if e.Test == "" {
				return
			}
			k := testKey{e.Package, e.Test}
			switch e.Action {
			case "output":
				if strings.Contains(e.Output, gate.NoServicesMark) {
					marked[k] = true
				}
			case "skip":
				if marked[k] {
					need[testKey{e.Package, topLevel(e.Test)}] = true
				}
			}
		})
		if err != nil {
			return err
		}
	}
	keys := make([]testKey, 0, len(need))
	for k := range need {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].pkg != keys[j].pkg {
			return keys[i].pkg < keys[j].pkg
		}
		return keys[i].test < keys[j].test
	})
	for _, k := range keys {
		if _, err := fmt.Fprintln(w, k.pkg, k.test); err != nil {
			return err
		}
	}
	return nil
}

// result is one run of a top-level test.
type result struct {
	stage   string
	key     testKey
	seconds float64
	action  string
}

// slowest prints the n slowest top-level test runs of the files, each labelled with its stage.
func slowest(w io.Writer, args []string) error {
	fs := flag.NewFlagSet("slowest", flag.ContinueOnError)
	n := fs.Int("n", 10, "how many tests to print")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var all []result
	for _, arg := range fs.Args() {
		stage, path, ok := strings.Cut(arg, "=")
		if !ok {
			return fmt.Errorf("slowest: %q is not STAGE=FILE", arg)
		}
		err := readEvents(path, func(e event) {
			if e.Test == "" || strings.Contains(e.Test, "/") {
				return
			}
			switch e.Action {
			case "pass", "fail", "skip":
				all = append(all, result{stage, testKey{e.Package, e.Test}, e.Elapsed, e.Action})
			}
		})
		if err != nil {
			return err
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].seconds > all[j].seconds })
	for i, r := range all {
		if i == *n {
			break
		}
		if _, err := fmt.Fprintf(w, "%8.1f s  %-14s %s %s (%s)\n", r.seconds, r.stage, r.key.pkg, r.key.test, r.action); err != nil {
			return err
		}
	}
	return nil
}
