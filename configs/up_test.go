package configs

import (
	"strings"
	"testing"
)

// TestMemoryBudgetEverySource: the budget and the per-node budget of up load from the file,
// the environment and the flag, in that order of precedence, and parse as quantities.
func TestMemoryBudgetEverySource(t *testing.T) {
	budget := func(c *Up) int64 { return c.MemoryBudgetBytes() }
	perNode := func(c *Up) int64 { return c.MemoryBudgetPerNodeBytes() }
	for _, tc := range []struct {
		name   string
		envKey string // MINIPLANE_MEMORY_BUDGET unless set
		file   string
		env    string
		args   []string
		get    func(*Up) int64
		want   int64
	}{
		{name: "default", get: budget, want: 208 << 20},
		{name: "file", file: "memory-budget: 1Gi\n", get: budget, want: 1 << 30},
		{name: "env over file", file: "memory-budget: 1Gi\n", env: "512Mi", get: budget, want: 512 << 20},
		{name: "flag over env", env: "512Mi", args: []string{"--memory-budget", "2Gi"}, get: budget, want: 2 << 30},
		{name: "zero: no budget", args: []string{"--memory-budget=0"}, get: budget, want: 0},
		{name: "decimal units", args: []string{"--memory-budget=300M"}, get: budget, want: 300_000_000},
		{name: "per node default", get: perNode, want: 150 << 10},
		{name: "per node file", file: "memory-budget-per-node: 200Ki\n", get: perNode, want: 200 << 10},
		{name: "per node env over file", envKey: "MINIPLANE_MEMORY_BUDGET_PER_NODE", file: "memory-budget-per-node: 200Ki\n", env: "100Ki", get: perNode, want: 100 << 10},
		{name: "per node flag over env", envKey: "MINIPLANE_MEMORY_BUDGET_PER_NODE", env: "100Ki", args: []string{"--memory-budget-per-node", "1Mi"}, get: perNode, want: 1 << 20},
		{name: "per node zero: a flat budget", args: []string{"--memory-budget-per-node=0"}, get: perNode, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				key := tc.envKey
				if key == "" {
					key = "MINIPLANE_MEMORY_BUDGET"
				}
				t.Setenv(key, tc.env)
			}
			args := tc.args
			if tc.file != "" {
				args = append([]string{"--config", writeFile(t, tc.file)}, args...)
			}
			cfg, b := bindUp(t, args...)
			if err := b.Load(); err != nil {
				t.Fatal(err)
			}
			cfg.Resolve()
			if err := cfg.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if got := tc.get(cfg); got != tc.want {
				t.Errorf("got %d bytes, want %d", got, tc.want)
			}
		})
	}
}

// TestMemoryBudgetInvalid: a budget or per-node budget that is not a quantity, or is
// negative, is reported with the option's name.
func TestMemoryBudgetInvalid(t *testing.T) {
	for _, key := range []string{"memory-budget", "memory-budget-per-node"} {
		for _, v := range []string{"lots", "-1Gi", ""} {
			t.Run(key+"="+v, func(t *testing.T) {
				cfg := DefaultUp()
				if key == "memory-budget" {
					cfg.MemoryBudget = v
				} else {
					cfg.MemoryBudgetPerNode = v
				}
				cfg.Resolve()
				err := cfg.Validate()
				if err == nil || !strings.HasPrefix(err.Error(), key+": ") {
					t.Errorf("Validate(%s=%q) = %v, want an error naming %s", key, v, err, key)
				}
			})
		}
	}
}
