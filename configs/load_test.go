package configs

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// bindUp binds a fresh up configuration to a flag set parsed from args.
func bindUp(t *testing.T, args ...string) (*Up, *Binding) {
	t.Helper()
	cfg := DefaultUp()
	flags := pflag.NewFlagSet("up", pflag.ContinueOnError)
	b := Bind(flags, &cfg)
	if err := flags.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &cfg, b
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestUpPrecedence: defaults < YAML file < MINIPLANE_* environment < flags, for top-level
// and nested keys, with map keys that contain dots kept intact.
func TestUpPrecedence(t *testing.T) {
	file := writeFile(t, `
nodes: 7
listen: 127.0.0.1:7000
apiserver:
  event-ttl: 10m
  compaction-interval: 1m
kubeletstub:
  template:
    labels:
      topology.kubernetes.io/zone: zone-a
`)
	t.Setenv("MINIPLANE_NODES", "9")                          // env beats the file
	t.Setenv("MINIPLANE_APISERVER_EVENT_TTL", "30m")          // nested env beats the file
	t.Setenv("MINIPLANE_APISERVER_WATCH_CACHE_EVENTS", "500") // env beats the default
	cfg, b := bindUp(t, "--config", file, "--nodes=11", "--scheduler-workers=3")
	if err := b.Load(); err != nil {
		t.Fatal(err)
	}
	cfg.Resolve()
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
		{"section flag", cfg.Scheduler.Workers == 3},
		{"dotted map key intact", cfg.KubeletStub.Template.Labels["topology.kubernetes.io/zone"] == "zone-a"},
		{"listen derived", cfg.APIServer.Listen == "127.0.0.1:7000"},
		{"fleet size derived", cfg.KubeletStub.Nodes == 11},
		{"cert dir derived", cfg.APIServer.CertDir == filepath.Join(".miniplane", "pki")},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: got %+v", c.name, cfg)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

// TestUnknownKeysAreErrors: a typo in the file is reported, not silently ignored, also
// inside the parts Load decodes itself.
func TestUnknownKeysAreErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"top level", "nodez: 3\n", "nodez"},
		{"section", "scheduler:\n  wokers: 3\n", "wokers"},
		{"override entry", "kubeletstub:\n  overrides:\n    - name: n\n      lables: {a: b}\n", "lables"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, b := bindUp(t, "--config", writeFile(t, tc.yaml))
			if err := b.Load(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load = %v, want an error naming %s", err, tc.want)
			}
		})
	}
	_, b := bindUp(t, "--config", filepath.Join(t.TempDir(), "missing.yaml"))
	if err := b.Load(); err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
}

// mapOption is a map-valued setting of up, and how each source spells one entry of it.
type mapOption struct {
	key string
	get func(*Up) any
	// entry is the key written in the sources (in a case that differs from the canonical
	// one where the map has a canonical spelling), with its value.
	entry, value string
	// want is the whole map Load must produce.
	want any
}

var upMapOptions = []mapOption{
	{
		key: "controller-manager::feature-gates", get: func(c *Up) any { return c.ControllerManager.FeatureGates },
		entry: "scheduleDaemonSetPods", value: "false",
		want: FeatureGates{FeatureScheduleDaemonSetPods: false},
	},
	{
		key: "kubeletstub::template::labels", get: func(c *Up) any { return c.KubeletStub.Template.Labels },
		entry: "example.com/Team", value: "Blue",
		want: map[string]string{"example.com/Team": "Blue"},
	},
	{
		key: "kubeletstub::template::annotations", get: func(c *Up) any { return c.KubeletStub.Template.Annotations },
		entry: "example.com/Owner", value: "Ops",
		want: map[string]string{"example.com/Owner": "Ops"},
	},
	{
		key: "kubeletstub::template::faults::conditions", get: func(c *Up) any { return c.KubeletStub.Template.Faults.Conditions },
		entry: "memorypressure", value: "True",
		want: NodeConditions{"MemoryPressure": "True"},
	},
}

// TestEveryMapOptionIsCovered fails when a map-valued setting is added to up without a case
// in upMapOptions: each one must be shown to keep its keys.
func TestEveryMapOptionIsCovered(t *testing.T) {
	b := Bind(nil, &Up{})
	var covered []string
	for _, m := range upMapOptions {
		covered = append(covered, m.key)
	}
	for _, o := range b.options {
		if o.typ.Kind() == reflect.Map && !slices.Contains(covered, o.key) {
			t.Errorf("map option %s has no case in upMapOptions", o.key)
		}
	}
}

// yamlFor writes value at the nested key as YAML.
func yamlFor(key, entry, value string) string {
	var sb strings.Builder
	parts := strings.Split(key, keyDelimiter)
	for i, p := range parts {
		sb.WriteString(strings.Repeat("  ", i) + p + ":\n")
	}
	sb.WriteString(strings.Repeat("  ", len(parts)) + entry + ": \"" + value + "\"\n")
	return sb.String()
}

// TestMapOptionsKeepTheirKeys loads each map-valued setting from the file, the environment
// and the flag, many times (Go randomises map iteration, which is how a duplicate key in
// two spellings used to pick a winner at random), and wants exactly the entry set, in its
// canonical spelling, merged with the defaults.
func TestMapOptionsKeepTheirKeys(t *testing.T) {
	for _, m := range upMapOptions {
		for _, source := range []string{"file", "env", "flag"} {
			t.Run(m.key+"/"+source, func(t *testing.T) {
				for range 50 {
					var args []string
					switch source {
					case "file":
						args = []string{"--config", writeFile(t, yamlFor(m.key, m.entry, m.value))}
					case "env":
						t.Setenv(envName(m.key), m.entry+"="+m.value)
					case "flag":
						flag := "--" + flagOf(t, m.key)
						args = []string{flag, m.entry + "=" + m.value}
					}
					cfg, b := bindUp(t, args...)
					if err := b.Load(); err != nil {
						t.Fatal(err)
					}
					if got := m.get(cfg); !reflect.DeepEqual(got, m.want) {
						t.Fatalf("%s from %s = %#v, want %#v", m.key, source, got, m.want)
					}
					cfg.Resolve()
					if err := cfg.Validate(); err != nil {
						t.Fatalf("Validate: %v", err)
					}
				}
			})
		}
	}
}

// flagOf returns up's flag for the option with key, failing when it has none: every map
// option must be settable from the command line.
func flagOf(t *testing.T, key string) string {
	t.Helper()
	if flag := Bind(nil, &Up{}).Flag(key); flag != "" {
		return flag
	}
	t.Fatalf("%s has no flag", key)
	return ""
}

// TestFeatureGateEverySource is the reported bug: ScheduleDaemonSetPods: false written in the
// file, the environment or a flag, in any case, turns the v1.12 placement mode on every time.
func TestFeatureGateEverySource(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  string
		args func(t *testing.T) []string
	}{
		{name: "file, canonical case", args: func(t *testing.T) []string {
			return []string{"--config", writeFile(t, "controller-manager:\n  feature-gates:\n    ScheduleDaemonSetPods: false\n")}
		}},
		{name: "file, lower case", args: func(t *testing.T) []string {
			return []string{"--config", writeFile(t, "controller-manager:\n  feature-gates:\n    scheduledaemonsetpods: false\n")}
		}},
		{name: "env", env: "ScheduleDaemonSetPods=false"},
		{name: "flag", args: func(*testing.T) []string {
			return []string{"--controller-manager-feature-gates", "ScheduleDaemonSetPods=false"}
		}},
		{name: "flag over file", args: func(t *testing.T) []string {
			return []string{"--config", writeFile(t, "controller-manager:\n  feature-gates:\n    scheduledaemonsetpods: true\n"),
				"--controller-manager-feature-gates", "ScheduleDaemonSetPods=false"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 50 {
				if tc.env != "" {
					t.Setenv("MINIPLANE_CONTROLLER_MANAGER_FEATURE_GATES", tc.env)
				}
				var args []string
				if tc.args != nil {
					args = tc.args(t)
				}
				cfg, b := bindUp(t, args...)
				if err := b.Load(); err != nil {
					t.Fatal(err)
				}
				if cfg.ControllerManager.FeatureEnabled(FeatureScheduleDaemonSetPods) || len(cfg.ControllerManager.FeatureGates) != 1 {
					t.Fatalf("feature gates = %v, want only ScheduleDaemonSetPods=false", cfg.ControllerManager.FeatureGates)
				}
			}
		})
	}
}

// TestOverridesKeepLabelCase: lists of structs that hold maps are read without viper too.
func TestOverridesKeepLabelCase(t *testing.T) {
	cfg, b := bindUp(t, "--config", writeFile(t, `
kubeletstub:
  overrides:
    - name: stub-node-1
      labels: {example.com/Zone: West}
      faults: {conditions: {DiskPressure: "True"}, reject-rate: 0.5}
`))
	if err := b.Load(); err != nil {
		t.Fatal(err)
	}
	tpl := cfg.KubeletStub.NodeTemplate("stub-node-1")
	if tpl.Labels["example.com/Zone"] != "West" || tpl.Faults.Conditions["DiskPressure"] != "True" || tpl.Faults.RejectRate != 0.5 {
		t.Fatalf("override = %+v", tpl)
	}
}

// TestCheckNamesTheOptionAsSet: a rejected value is named the way the user set it.
func TestCheckNamesTheOptionAsSet(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args func(t *testing.T) []string
		want string
	}{
		{name: "flag", args: func(*testing.T) []string { return []string{"--controller-manager-leader-elect-lease-duration=1s"} },
			want: "--controller-manager-leader-elect-lease-duration: must be greater than --controller-manager-leader-elect-renew-deadline"},
		{name: "env", env: map[string]string{"MINIPLANE_SCHEDULER_WORKERS": "0"},
			want: "MINIPLANE_SCHEDULER_WORKERS: must be at least 1"},
		{name: "file", args: func(t *testing.T) []string {
			return []string{"--config", writeFile(t, "controller-manager:\n  feature-gates: {Nope: true}\n")}
		}, want: `.yaml: controller-manager.feature-gates: unknown feature gate "Nope"`},
		{name: "option without a flag", args: func(t *testing.T) []string {
			return []string{"--config", writeFile(t, "controller-manager:\n  daemonset:\n    burst-replicas: 0\n")}
		}, want: ".yaml: controller-manager.daemonset.burst-replicas: must be at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var args []string
			if tc.args != nil {
				args = tc.args(t)
			}
			cfg, b := bindUp(t, args...)
			if err := b.Load(); err != nil {
				t.Fatal(err)
			}
			cfg.Resolve()
			err := b.Check(cfg.Validate())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check(Validate()) = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestEveryCommandBinds: each command's configuration declares its flags without a clash
// (pflag panics on a duplicate), and every flag is documented.
func TestEveryCommandBinds(t *testing.T) {
	for name, cfg := range map[string]any{
		"up": &Up{}, "apiserver": &APIServer{}, "controller-manager": &ControllerManager{}, "scheduler": &Scheduler{},
		"kubeletstub": &KubeletStub{}, "etcd": &Etcd{}, "certs": &Certs{}, "probe": &Probe{}, "logging": &Logging{},
	} {
		t.Run(name, func(t *testing.T) {
			flags := pflag.NewFlagSet(name, pflag.ContinueOnError)
			Bind(flags, cfg)
			n := 0
			flags.VisitAll(func(f *pflag.Flag) {
				n++
				if f.Usage == "" {
					t.Errorf("--%s has no help", f.Name)
				}
			})
			if n < 2 {
				t.Errorf("%d flags", n)
			}
		})
	}
}

// TestShippedFilesLoad: every configuration file in the repository loads into its command's
// configuration and validates, so an example cannot rot.
func TestShippedFilesLoad(t *testing.T) {
	up := DefaultUp()
	stub := DefaultKubeletStub()
	cm := DefaultControllerManager()
	sched := DefaultScheduler()
	cases := []struct {
		file     string
		cfg      any
		validate func() error
	}{
		{"miniplane.yaml", &up, func() error { up.Resolve(); return up.Validate() }},
		{"kubeletstub.yaml", &stub, func() error { return stub.Validate() }},
		{"compose/controller-manager.yaml", &cm, func() error { return cm.Validate() }},
		{"compose/scheduler.yaml", &sched, func() error { return sched.Validate() }},
	}
	for _, name := range []string{"kubelet-fleet", "kubelet-node-a", "kubelet-node-b", "kubelet-node-c"} {
		c := DefaultKubeletStub()
		cases = append(cases, struct {
			file     string
			cfg      any
			validate func() error
		}{"compose/" + name + ".yaml", &c, func() error { return c.Validate() }})
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			if err := LoadFile(tc.cfg, tc.file); err != nil {
				t.Fatal(err)
			}
			if err := tc.validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
	if !up.ControllerManager.FeatureGates[FeatureScheduleDaemonSetPods] || len(up.ControllerManager.FeatureGates) != 1 {
		t.Errorf("miniplane.yaml feature gates = %v", up.ControllerManager.FeatureGates)
	}
}
