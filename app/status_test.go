package app

import (
	"strings"
	"testing"
)

// TestStatusWarnsOfRecordsDeletedUnread: a group whose commit is below a topic's start (the broker
// deleted records it had not read) is shown with the loss, per partition, in words an operator
// acts on; a group without such a gap shows no warning.
func TestStatusWarnsOfRecordsDeletedUnread(t *testing.T) {
	gs := groupStatus{Role: "facts-sink", Group: "g", State: "Empty", title: "facts sink", Lag: 50, Deleted: 50,
		Partitions: []partitionStatus{
			{Topic: "in", Partition: 0, Committed: 100, Start: 150, End: 200, Lag: 50, Deleted: 50},
			{Topic: "in", Partition: 1, Committed: 200, Start: 150, End: 200},
		}}
	var b strings.Builder
	if err := printGroupStatus(&b, gs); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"lag 50, 50 deleted unread", "WARNING: 50 records after the group's committed offsets were deleted",
		"in/0: committed 100, the topic starts at 150: 50 lost"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "in/1:") {
		t.Errorf("status warns of a partition that lost nothing:\n%s", out)
	}
	gs.Deleted, gs.Partitions[0].Deleted = 0, 0
	b.Reset()
	if err := printGroupStatus(&b, gs); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "WARNING") || strings.Contains(b.String(), "deleted") {
		t.Errorf("status warns without a loss:\n%s", b.String())
	}
}
