package configs

import (
	"strings"
	"testing"
)

// TestMemoryBudgetEverySource: the budget loads from the file, the environment and the
// flag, in that order of precedence, and parses as a quantity.
func TestMemoryBudgetEverySource(t *testing.T) {
	for _, tc := range []struct {
		name string
		file string
		env  string
		args []string
		want int64
	}{
		{name: "default", want: 208 << 20},
		{name: "file", file: "memory-budget: 1Gi\n", want: 1 << 30},
		{name: "env over file", file: "memory-budget: 1Gi\n", env: "512Mi", want: 512 << 20},
		{name: "flag over env", env: "512Mi", args: []string{"--memory-budget", "2Gi"}, want: 2 << 30},
		{name: "zero: no budget", args: []string{"--memory-budget=0"}, want: 0},
		{name: "decimal units", args: []string{"--memory-budget=300M"}, want: 300_000_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("MINIPLANE_MEMORY_BUDGET", tc.env)
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
			if got := cfg.MemoryBudgetBytes(); got != tc.want {
				t.Errorf("MemoryBudgetBytes = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestMemoryBudgetInvalid: a budget that is not a quantity, or is negative, is reported
// with the option's name.
func TestMemoryBudgetInvalid(t *testing.T) {
	for _, v := range []string{"lots", "-1Gi", ""} {
		t.Run(v, func(t *testing.T) {
			cfg := DefaultUp()
			cfg.MemoryBudget = v
			cfg.Resolve()
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), "memory-budget") {
				t.Errorf("Validate(%q) = %v, want an error naming memory-budget", v, err)
			}
		})
	}
}
