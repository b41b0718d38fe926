package configs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// TestUpPrecedence: defaults < YAML file < MINIPLANE_* environment < flags, for top-level
// and nested keys, with map keys that contain dots kept intact.
func TestUpPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "up.yaml")
	if err := os.WriteFile(file, []byte(`
nodes: 7
listen: 127.0.0.1:7000
apiserver:
  event-ttl: 10m
  compaction-interval: 1m
kubeletstub:
  template:
    labels:
      topology.kubernetes.io/zone: zone-a
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MINIPLANE_NODES", "9")                          // env beats the file
	t.Setenv("MINIPLANE_APISERVER_EVENT_TTL", "30m")          // nested env beats the file
	t.Setenv("MINIPLANE_APISERVER_WATCH_CACHE_EVENTS", "500") // env beats the default
	flags := pflag.NewFlagSet("up", pflag.ContinueOnError)
	flags.Int("nodes", 3, "")
	flags.String("listen", "127.0.0.1:6443", "")
	flags.String("data-dir", "./.miniplane", "")
	if err := flags.Parse([]string{"--nodes=11"}); err != nil { // the flag beats everything
		t.Fatal(err)
	}
	cfg := DefaultUp()
	if err := Load(&cfg, file, flags, nil); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name string
		ok   bool
	}{
		{"flag over env over file", cfg.Nodes == 11},
		{"file over an unset flag's default", cfg.Listen == "127.0.0.1:7000"},
		{"default kept", cfg.DataDir == "./.miniplane"},
		{"nested env over file", cfg.APIServer.EventTTL == 30*time.Minute},
		{"nested file over default", cfg.APIServer.CompactionInterval == time.Minute},
		{"nested env over default", cfg.APIServer.WatchCacheEvents == 500},
		{"dotted map key intact", cfg.KubeletStub.Template.Labels["topology.kubernetes.io/zone"] == "zone-a"},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: got %+v", c.name, cfg)
		}
	}
}

// TestUnknownKeysAreErrors: a typo in the file is reported, not silently ignored.
func TestUnknownKeysAreErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "up.yaml")
	if err := os.WriteFile(file, []byte("nodez: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultUp()
	err := Load(&cfg, file, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "nodez") {
		t.Fatalf("Load with a typo = %v, want an error naming nodez", err)
	}
	if err := Load(&cfg, filepath.Join(t.TempDir(), "missing.yaml"), nil, nil); err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
}
