package configs

import (
	"strings"
	"testing"
)

// TestEtcdCatchUpEntries: etcd's default for a member of its own, at least one entry.
func TestEtcdCatchUpEntries(t *testing.T) {
	c := DefaultEtcd()
	if c.SnapshotCatchUpEntries != 5000 {
		t.Errorf("default catch-up entries %d, want etcd's 5000", c.SnapshotCatchUpEntries)
	}
	c.SnapshotCatchUpEntries = 0
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "snapshot-catchup-entries") {
		t.Errorf("Validate with 0 catch-up entries = %v", err)
	}
}
