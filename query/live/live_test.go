package live

import (
	"strings"
	"testing"
)

func TestNewRefusesNilTopology(t *testing.T) {
	if _, err := New(nil, Config{Brokers: []string{"127.0.0.1:1"}}); err == nil || !strings.Contains(err.Error(), "topology is nil") {
		t.Fatalf("New(nil): %v, want an error naming the topology", err)
	}
}
