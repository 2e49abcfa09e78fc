package membership

import (
	"errors"
	"strings"
	"testing"
)

func TestValidID(t *testing.T) {
	for _, ok := range []string{"node-1", "a.b_c-D9", strings.Repeat("x", MaxIDLength)} {
		if err := ValidID(ok); err != nil {
			t.Errorf("ValidID(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a b", "host/1", "é", strings.Repeat("x", MaxIDLength+1)} {
		if err := ValidID(bad); err == nil {
			t.Errorf("ValidID(%q) accepted", bad)
		}
	}
}

func TestHostIDIsValid(t *testing.T) {
	id, err := HostID()
	if err != nil {
		t.Fatal(err)
	}
	if err := ValidID(MemberID(id, "processor")); err != nil {
		t.Fatalf("host id %q: %v", id, err)
	}
}

// TestLockRefusesASecondHolder: while one holder has (group, id), a second is refused with a
// ClashError naming both; another id or another group is free; after release the id is free again.
func TestLockRefusesASecondHolder(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	release, err := Lock("g/1", "node-processor")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Lock("g/1", "node-processor")
	var clash *ClashError
	if !errors.As(err, &clash) {
		t.Fatalf("second lock: %v, want a ClashError", err)
	}
	for _, want := range []string{"node-processor", "g/1", "membership.instance_id"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	for _, other := range [][2]string{{"g/1", "other-processor"}, {"g2", "node-processor"}} {
		r, err := Lock(other[0], other[1])
		if err != nil {
			t.Fatalf("lock %v: %v", other, err)
		}
		r()
	}
	release()
	r, err := Lock("g/1", "node-processor")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	r()
}
