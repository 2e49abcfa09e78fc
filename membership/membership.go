// Package membership gives every consumer-group member of abacus (the processor's sarama group
// under goka, the sinks' franz-go groups) a stable identity: a static group.instance.id (KIP-345).
//
// A static member that restarts with the same instance id takes its partitions back at once: the
// group coordinator swaps the new member for the old one and hands it the old assignment, without
// a rebalance of the other members and without waiting for the dead member's session to time out.
// The price is that a static member does not leave the group when it closes (the coordinator keeps
// its partitions for it until the session timeout), so a clean stop must leave explicitly (the
// processors and sinks packages do), and two live processes must never share an id: the newer one
// fences the older. This package names ids, refuses malformed ones, catches two processes of one
// host that would share an id (Lock), and words the error of a fenced member (FencedError).
//
// It must never decide anything about partitions or offsets: it only names members.
package membership

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// MaxIDLength is the longest group.instance.id Kafka accepts.
const MaxIDLength = 249

// validID is what Kafka accepts in a group.instance.id (the rule of topic names).
var validID = regexp.MustCompile(`^[0-9a-zA-Z._-]+$`)

// ValidID reports why id cannot be a group.instance.id, or nil.
func ValidID(id string) error {
	switch {
	case id == "":
		return errors.New("empty")
	case id == "." || id == "..":
		return fmt.Errorf("%q is not allowed", id)
	case len(id) > MaxIDLength:
		return fmt.Errorf("%d characters, over Kafka's limit of %d", len(id), MaxIDLength)
	case !validID.MatchString(id):
		return fmt.Errorf("%q has a character other than ASCII letters, digits, '.', '_' and '-'", id)
	}
	return nil
}

// CheckSettings reports what is wrong with a member's instance id (empty: a dynamic member),
// session timeout and heartbeat interval (zero: the client's defaults), through bad, which
// receives the name of the setting at fault and a message.
func CheckSettings(instanceID string, sessionTimeout, heartbeat time.Duration, bad func(field, format string, args ...any)) {
	if instanceID != "" {
		if err := ValidID(instanceID); err != nil {
			bad("InstanceID", "%v", err)
		}
	}
	if sessionTimeout < 0 || heartbeat < 0 {
		bad("SessionTimeout", "SessionTimeout and HeartbeatInterval must not be negative")
	} else if heartbeat > 0 && sessionTimeout > 0 && heartbeat >= sessionTimeout {
		bad("HeartbeatInterval", "%v is not shorter than SessionTimeout %v", heartbeat, sessionTimeout)
	}
}

// HostID is the default instance id of a process: its host name, with every character Kafka does
// not accept replaced by '-'. A host name is stable across restarts of a machine, a VM or a
// StatefulSet's pod, which is what static membership needs; two processes of one role on one host
// must be told apart by configuration (Lock catches them when they are not).
func HostID() (string, error) {
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("host name: %w", err)
	}
	h = strings.Map(func(r rune) rune {
		if r < 128 && validID.MatchString(string(r)) {
			return r
		}
		return '-'
	}, h)
	if h == "" || h == "." || h == ".." {
		return "", fmt.Errorf("host name %q cannot name a group member", h)
	}
	return h, nil
}

// MemberID is the group.instance.id of one role of a process: the process's instance id and the
// role, so that the member is recognisable in the group's description (`abacus status`,
// kafka-consumer-groups.sh) and an id is never reused across the roles of a process.
func MemberID(instanceID, role string) string { return instanceID + "-" + role }

// LockDir is where Lock keeps its lock files.
func LockDir() string { return filepath.Join(os.TempDir(), "abacus-members") }

// Lock takes a lock, on this host, on being member instanceID of group, for the life of the
// process (release gives it back). A second process of the host that would join the group under
// the same id fails here, before it joins: joining would fence the first one, which is running
// fine. Processes on different hosts (or with different temporary folders) are not seen here; the
// broker fences the older one, which stops with a FencedError.
func Lock(group, instanceID string) (release func(), err error) {
	dir := LockDir()
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("membership: lock folder: %w", err)
	}
	// Group names may hold characters a file name may not; the id is already safe.
	name := strings.Map(func(r rune) rune {
		if r == '/' || r == 0 || r == '\\' {
			return '_'
		}
		return r
	}, group) + "." + instanceID + ".lock"
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("membership: lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, &ClashError{Group: group, InstanceID: instanceID, LockFile: path}
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// ClashError says that another process of this host is already member InstanceID of Group.
type ClashError struct {
	Group, InstanceID, LockFile string
}

func (e *ClashError) Error() string {
	return fmt.Sprintf("another process on this host is already member %s of group %s (%s is locked): "+
		"two instances of one role need their own membership.instance_id (or ABACUS_INSTANCE_ID)",
		e.InstanceID, e.Group, e.LockFile)
}

// FencedError says that the broker fenced this member: another process joined the group with the
// same instance id, and the group now belongs to it. The member must stop, not rejoin: a rejoin
// would fence the other process in turn, and the two would take the partitions from each other.
type FencedError struct {
	Group, InstanceID string
	Err               error // the client's error (FENCED_INSTANCE_ID)
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("group %s: instance id %s was taken over by another process (the broker fenced this one: %v); "+
		"two instances of one role need their own membership.instance_id (or ABACUS_INSTANCE_ID)",
		e.Group, e.InstanceID, e.Err)
}

// Unwrap gives the client's error.
func (e *FencedError) Unwrap() error { return e.Err }

// IsFenced reports whether err, returned by processors.Processor.Run or
// sinks.FlushThenCommit.Run, says that the broker fenced this member (a FencedError): another
// process joined the group under its instance id.
func IsFenced(err error) bool {
	var f *FencedError
	return errors.As(err, &f)
}
