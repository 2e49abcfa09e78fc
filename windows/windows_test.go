package windows

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func parseWindows(t *testing.T, s string) []Window {
	t.Helper()
	var out []Window
	for _, f := range strings.Fields(s) {
		var w Window
		if _, err := fmt.Sscanf(f, "[%d,%d)", &w.Start, &w.End); err != nil {
			t.Fatalf("window %q: %v", f, err)
		}
		out = append(out, w)
	}
	return out
}

func fmtWindows(ws []Window) string {
	var b strings.Builder
	for i, w := range ws {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "[%d,%d)", w.Start, w.End)
	}
	return b.String()
}

func readCases(t *testing.T, file string, fn func(line string)) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fn(line)
	}
}

// TestAssign checks window assignment at boundaries, for negative times and hopping overlaps,
// from testdata/assign.txt.
func TestAssign(t *testing.T) {
	n := 0
	readCases(t, "testdata/assign.txt", func(line string) {
		lhs, want, ok := strings.Cut(line, "->")
		if !ok {
			t.Fatalf("no -> in %q", line)
		}
		f := strings.Fields(lhs)
		ms := func(s string) time.Duration {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			return time.Duration(v) * time.Millisecond
		}
		params := strings.Split(f[1], ",")
		var spec Spec
		switch f[0] {
		case "tumbling":
			spec = Tumbling(ms(params[0]))
		case "hopping":
			spec = Hopping(ms(params[0]), ms(params[1]))
		case "session":
			spec = Session(ms(params[0]))
		}
		if err := spec.Validate(); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		et := int64(ms(f[2]) / time.Millisecond)
		got := spec.Assign(et, nil)
		if fmtWindows(got) != fmtWindows(parseWindows(t, want)) {
			t.Errorf("%s: got %s, want %s", strings.TrimSpace(lhs), fmtWindows(got), strings.TrimSpace(want))
		}
		for _, w := range got {
			if !w.Contains(et) {
				t.Errorf("%s: window %v does not contain %d", strings.TrimSpace(lhs), w, et)
			}
		}
		n++
	})
	if n == 0 {
		t.Fatal("no cases read")
	}
}

// TestMergeSession checks session merges (bridging two sessions) and non-merges from
// testdata/sessions.txt.
func TestMergeSession(t *testing.T) {
	readCases(t, "testdata/sessions.txt", func(line string) {
		lhs, rhs, _ := strings.Cut(line, "->")
		openS, newS, _ := strings.Cut(lhs, ";")
		open := parseWindows(t, openS)
		nw := parseWindows(t, newS)[0]
		rf := strings.Fields(rhs)
		want := parseWindows(t, rf[0])[0]
		merged, absorbed := MergeSession(open, nw)
		if merged != want {
			t.Errorf("%s: merged %v, want %v", line, merged, want)
		}
		got := map[int]bool{}
		for _, a := range absorbed {
			got[a] = true
		}
		if len(got) != len(rf)-1 {
			t.Errorf("%s: absorbed %v, want %v", line, absorbed, rf[1:])
		}
		for _, s := range rf[1:] {
			i, _ := strconv.Atoi(s)
			if !got[i] {
				t.Errorf("%s: session %d not absorbed (got %v)", line, i, absorbed)
			}
		}
	})
}

func TestClosed(t *testing.T) {
	w := Window{Start: 0, End: 60_000}
	for _, c := range []struct {
		grace, streamTime int64
		closed            bool
	}{
		{0, 59_999, false}, {0, 60_000, true}, {10_000, 69_999, false}, {10_000, 70_000, true},
	} {
		if got := w.Closed(c.grace, c.streamTime); got != c.closed {
			t.Errorf("grace %d stream time %d: closed %v, want %v", c.grace, c.streamTime, got, c.closed)
		}
	}
}

func TestValidateNamesField(t *testing.T) {
	for _, c := range []struct {
		spec Spec
		want string
	}{
		{Tumbling(0), "tumbling size"},
		{Hopping(time.Minute, 2*time.Minute), "advance"},
		{Hopping(time.Minute, 0), "hopping advance"},
		{Session(0), "session gap"},
		{Spec{}, "no window kind"},
	} {
		err := c.spec.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one naming %q", c.spec, err, c.want)
		}
	}
}

// TestSpecString: the description the query API's /api/v1/topologies and the CLI show.
func TestSpecString(t *testing.T) {
	for spec, want := range map[Spec]string{
		Tumbling(time.Minute):               "tumbling 1m0s",
		Hopping(5*time.Minute, time.Minute): "hopping 5m0s every 1m0s",
		Session(30 * time.Second):           "session, gap 30s",
		Tumbling(1500 * time.Millisecond):   "tumbling 1.5s",
		{}:                                  "unknown",
	} {
		if got := spec.String(); got != want {
			t.Errorf("%#v: %q, want %q", spec, got, want)
		}
	}
}
