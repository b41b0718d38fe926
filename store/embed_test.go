package store

import (
	"path/filepath"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/miniplane/miniplane/configs"
)

func TestQuietOnCloseDropsOnlyTheListenerErrorsOfAClose(t *testing.T) {
	tests := []struct {
		name    string
		closing bool
		msg     string
		logged  bool
	}{
		{"listener error while running", false, serveFailed, true},
		{"listener error while closing", true, serveFailed, false},
		{"other error while closing", true, "failed to publish local member", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs, logs := observer.New(zapcore.DebugLevel)
			closing := new(atomic.Bool)
			closing.Store(tt.closing)
			lg := zap.New(quietOnClose{Core: obs, closing: closing}).With(zap.String("name", "default"))
			lg.Error(tt.msg)
			if got := logs.Len() == 1; got != tt.logged {
				t.Errorf("logged = %v, want %v", got, tt.logged)
			}
		})
	}
}

func TestQuietOnCloseLoggerRejectsAnUnknownLevel(t *testing.T) {
	if _, err := quietOnCloseLogger("loud", new(atomic.Bool)); err == nil {
		t.Fatal("an unknown level was accepted")
	}
}

// TestEmbeddedMemberKeepsTheConfiguredCatchUpEntries: the member is started with the raft
// entries to keep in memory that its configuration names, not etcd's default.
func TestEmbeddedMemberKeepsTheConfiguredCatchUpEntries(t *testing.T) {
	cfg := configs.DefaultEtcd()
	cfg.Name = "test"
	cfg.DataDir = filepath.Join(t.TempDir(), "etcd")
	cfg.ListenClientURLs = []string{"http://127.0.0.1:0"}
	cfg.ListenPeerURLs = []string{"http://127.0.0.1:0"}
	cfg.UnsafeNoFsync = true
	cfg.SnapshotCatchUpEntries = configs.EmbeddedSnapshotCatchUpEntries
	member, err := StartEmbeddedEtcd(cfg, "fatal")
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	if got := member.etcd.Server.Cfg.SnapshotCatchUpEntries; got != uint64(configs.EmbeddedSnapshotCatchUpEntries) {
		t.Errorf("member keeps %d catch-up entries, want %d", got, configs.EmbeddedSnapshotCatchUpEntries)
	}
}
