package configs

import (
	"errors"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// TestAPIServerLimitsAndProfiling: the in-flight limits default to kube-apiserver's 400 and
// 200, the queue wait to 1s and profiling to on; the flags set them; 0 disables a limit and
// a negative limit or wait is refused by name.
func TestAPIServerLimitsAndProfiling(t *testing.T) {
	d := DefaultAPIServer()
	if d.MaxRequestsInflight != 400 || d.MaxMutatingRequestsInflight != 200 || d.InflightQueueWait != time.Second || !d.Profiling {
		t.Fatalf("defaults: %d, %d, wait %v, profiling %v; want 400, 200, 1s, true", d.MaxRequestsInflight, d.MaxMutatingRequestsInflight, d.InflightQueueWait, d.Profiling)
	}

	cfg := DefaultAPIServer()
	flags := pflag.NewFlagSet("apiserver", pflag.ContinueOnError)
	b := Bind(flags, &cfg)
	if err := flags.Parse([]string{"--max-requests-inflight=0", "--max-mutating-requests-inflight=7", "--inflight-queue-wait=250ms", "--profiling=false"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Load(); err != nil {
		t.Fatal(err)
	}
	if cfg.MaxRequestsInflight != 0 || cfg.MaxMutatingRequestsInflight != 7 || cfg.InflightQueueWait != 250*time.Millisecond || cfg.Profiling {
		t.Errorf("from flags: %d, %d, wait %v, profiling %v; want 0, 7, 250ms, false", cfg.MaxRequestsInflight, cfg.MaxMutatingRequestsInflight, cfg.InflightQueueWait, cfg.Profiling)
	}

	tests := []struct {
		name    string
		mutate  func(*APIServer)
		wantKey string // "" for valid
	}{
		{"defaults", func(*APIServer) {}, ""},
		{"both limits off", func(c *APIServer) { c.MaxRequestsInflight, c.MaxMutatingRequestsInflight = 0, 0 }, ""},
		{"negative read limit", func(c *APIServer) { c.MaxRequestsInflight = -1 }, "max-requests-inflight"},
		{"negative write limit", func(c *APIServer) { c.MaxMutatingRequestsInflight = -5 }, "max-mutating-requests-inflight"},
		{"no queue", func(c *APIServer) { c.InflightQueueWait = 0 }, ""},
		{"negative queue wait", func(c *APIServer) { c.InflightQueueWait = -time.Second }, "inflight-queue-wait"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultAPIServer()
			c.TokenFile = "tokens.csv"
			tc.mutate(&c)
			err := c.Validate()
			var oe *OptionError
			switch {
			case tc.wantKey == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tc.wantKey != "" && (!errors.As(err, &oe) || oe.Keys[0] != tc.wantKey):
				t.Errorf("Validate = %v, want an error about %s", err, tc.wantKey)
			}
		})
	}
}

// TestComponentProfiling: the components' health listeners have no authentication, so
// profiling is off by default, and on without a health listener it is refused.
func TestComponentProfiling(t *testing.T) {
	cm, sched, stub := DefaultControllerManager(), DefaultScheduler(), DefaultKubeletStub()
	if cm.Profiling || sched.Profiling || stub.Profiling {
		t.Fatalf("profiling on by default: controller-manager %v, scheduler %v, kubeletstub %v", cm.Profiling, sched.Profiling, stub.Profiling)
	}
	validate := map[string]func(profiling bool, listen string) error{
		"controller-manager": func(p bool, l string) error {
			c := DefaultControllerManager()
			c.Profiling, c.HealthListen = p, l
			return c.Validate()
		},
		"scheduler": func(p bool, l string) error {
			c := DefaultScheduler()
			c.Profiling, c.HealthListen = p, l
			return c.Validate()
		},
		"kubeletstub": func(p bool, l string) error {
			c := DefaultKubeletStub()
			c.Profiling, c.HealthListen = p, l
			return c.Validate()
		},
	}
	for name, v := range validate {
		if err := v(true, "127.0.0.1:0"); err != nil {
			t.Errorf("%s: profiling with a health listener: %v", name, err)
		}
		var oe *OptionError
		if err := v(true, ""); !errors.As(err, &oe) || oe.Keys[0] != "profiling" {
			t.Errorf("%s: profiling without a health listener: %v, want an error about profiling", name, err)
		}
	}

	// miniplane up prefixes each component's option.
	up, b := bindUp(t, "--controller-manager-profiling", "--controller-manager-health-listen=127.0.0.1:0",
		"--scheduler-profiling", "--kubeletstub-profiling", "--apiserver-profiling=false", "--apiserver-max-requests-inflight=9")
	if err := b.Load(); err != nil {
		t.Fatal(err)
	}
	if !up.ControllerManager.Profiling || !up.Scheduler.Profiling || !up.KubeletStub.Profiling || up.APIServer.Profiling || up.APIServer.MaxRequestsInflight != 9 {
		t.Errorf("up flags: controller-manager %v, scheduler %v, kubeletstub %v, apiserver %v, max-requests-inflight %d",
			up.ControllerManager.Profiling, up.Scheduler.Profiling, up.KubeletStub.Profiling, up.APIServer.Profiling, up.APIServer.MaxRequestsInflight)
	}
}
