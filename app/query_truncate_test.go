package app

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/query"
)

// TestQuerySaysWhenTruncated: abacus query asks for one window more than -limit, cuts to the limit
// and prints which entities were cut and the flag that pages on by window start.
func TestQuerySaysWhenTruncated(t *testing.T) {
	at := func(min int) query.Window {
		return query.Window{Start: time.Date(2026, 11, 30, 10, min, 0, 0, time.UTC)}
	}
	res := map[string][]query.Window{
		"a": {at(3), at(2), at(1)}, // limit 2 + 1: cut
		"b": {at(3), at(2)},        // exactly the limit: not cut
	}
	cut := truncate(res, 2, query.Options{})
	if len(res["a"]) != 2 || len(res["b"]) != 2 || len(cut) != 1 || cut[0].entity != "a" {
		t.Fatalf("cut %v, left %d and %d windows", cut, len(res["a"]), len(res["b"]))
	}
	var out bytes.Buffer
	printTruncated(&out, cut, 2)
	if want := "a: truncated at -limit 2 windows; for the next ones repeat with -to 2026-11-30T10:02:00Z"; !strings.Contains(out.String(), want) {
		t.Fatalf("printed %q, want %q", out.String(), want)
	}
	res = map[string][]query.Window{"a": {at(1), at(2), at(3)}}
	if cut := truncate(res, 2, query.Options{OldestFirst: true}); len(cut) != 1 || cut[0].next != "-from 2026-11-30T10:02:00.001Z" {
		t.Fatalf("oldest first: %+v", cut)
	}
	// The flag it prints is one the command reads back.
	if got, err := parseTime("2026-11-30T10:02:00.001Z"); err != nil || got.UnixMilli() != at(2).Start.UnixMilli()+1 {
		t.Fatalf("-from as printed: %v %v", got, err)
	}
	if cut := truncate(res, 0, query.Options{}); cut != nil {
		t.Fatalf("-limit 0 cut %v", cut)
	}
}
