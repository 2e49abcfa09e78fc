package membership

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
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

func TestCheckSettings(t *testing.T) {
	for _, c := range []struct {
		id                 string
		session, heartbeat time.Duration
		want               string // "" when nothing is wrong; else field: message
	}{
		{"", 0, 0, ""},
		{"host-1-processor", 45 * time.Second, 3 * time.Second, ""},
		{"bad id!", 0, 0, "InstanceID: "},
		{"", -time.Second, 0, "SessionTimeout: SessionTimeout and HeartbeatInterval must not be negative"},
		{"", 0, -time.Second, "SessionTimeout: SessionTimeout and HeartbeatInterval must not be negative"},
		{"", 6 * time.Second, 6 * time.Second, "HeartbeatInterval: 6s is not shorter than SessionTimeout 6s"},
		{"", 0, 10 * time.Second, ""}, // the client's default session timeout: the broker judges
	} {
		var got []string
		CheckSettings(c.id, c.session, c.heartbeat, func(field, format string, args ...any) {
			got = append(got, field+": "+fmt.Sprintf(format, args...))
		})
		switch {
		case c.want == "" && len(got) != 0:
			t.Errorf("CheckSettings(%q, %v, %v) = %q, want nothing", c.id, c.session, c.heartbeat, got)
		case c.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], c.want)):
			t.Errorf("CheckSettings(%q, %v, %v) = %q, want one starting %q", c.id, c.session, c.heartbeat, got, c.want)
		}
	}
}

func TestIsFenced(t *testing.T) {
	f := &FencedError{Group: "g", InstanceID: "i", Err: errors.New("FENCED_INSTANCE_ID")}
	if !IsFenced(f) || !IsFenced(fmt.Errorf("run: %w", f)) {
		t.Fatal("a FencedError, or one wrapping it, is not fenced")
	}
	if IsFenced(errors.New("fenced")) || IsFenced(nil) {
		t.Fatal("another error is fenced")
	}
}
