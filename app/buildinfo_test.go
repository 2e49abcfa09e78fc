package app

import (
	"runtime"
	"strings"
	"testing"
)

// TestBuildInfoMetric: every process's registry says which build runs, for dashboards that must
// tell the old processes of a rollout from the new ones.
func TestBuildInfoMetric(t *testing.T) {
	mfs, err := newRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "abacus_build_info" {
			continue
		}
		if len(mf.GetMetric()) != 1 || mf.GetMetric()[0].GetGauge().GetValue() != 1 {
			t.Fatalf("abacus_build_info: %v", mf)
		}
		labels := map[string]string{}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["version"] != Version || labels["go"] != runtime.Version() || labels["commit"] == "" {
			t.Fatalf("abacus_build_info labels %v, want version %s, go %s and a commit", labels, Version, runtime.Version())
		}
		if v := buildInfo(); !strings.HasPrefix(v, runtime.Version()) {
			t.Errorf("abacus version says %q, want the Go version first", v)
		}
		return
	}
	t.Fatal("no abacus_build_info in a process's registry")
}
