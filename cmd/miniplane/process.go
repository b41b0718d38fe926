package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/miniplane/miniplane/configs"
	"github.com/miniplane/miniplane/internal/gcbudget"
)

// processBinding is a component command's --memory-budget (and MINIPLANE_MEMORY_BUDGET).
// The component's configuration file does not hold it: the file describes the component,
// the budget the process it runs in, which `up` shares between all of them.
type processBinding struct {
	cfg configs.Process
	b   *configs.Binding
}

// bindProcess declares --memory-budget on cmd, with budget as its default.
func bindProcess(cmd *cobra.Command, budget string) *processBinding {
	p := &processBinding{cfg: configs.Process{MemoryBudget: budget}}
	p.b = configs.BindFlagsOnly(cmd.Flags(), &p.cfg)
	return p
}

// start loads the budget and keeps the collector to it until ctx ends.
func (p *processBinding) start(ctx context.Context) error {
	if err := loadConfig(p.b, &p.cfg, configs.Process.Validate); err != nil {
		return err
	}
	startBudget(ctx, p.cfg, nil)
	return nil
}

// startBudget tunes the collector to cfg's budget until ctx ends, unless GOGC or GOMEMLIMIT
// is set in the environment. atLeast, when not nil, lets the budget grow (gcbudget.Options).
func startBudget(ctx context.Context, cfg configs.Process, atLeast func() uint64) {
	if !gcbudget.EnvOverrides() {
		go gcbudget.Run(ctx, uint64(cfg.MemoryBudgetBytes()), gcbudget.Options{AtLeast: atLeast})
	}
}
