// The agent, with one change: this kernel has no module support, so
// /proc/modules does not exist and the agent's module manager (which only
// checks for iptables modules, built in here) would stop the agent at start.
// The decorator hands the agent an empty manager whose start hook never runs.
package main

import (
	"github.com/cilium/hive/cell"

	"github.com/cilium/cilium/daemon/cmd"
	"github.com/cilium/cilium/pkg/datapath/linux/modules"
	"github.com/cilium/cilium/pkg/hive"
)

func main() {
	noModules := cell.Decorate(func() *modules.Manager { return &modules.Manager{} }, cmd.Agent)
	cmd.Execute(cmd.NewAgentCmd(func() *hive.Hive { return hive.New(noModules) }))
}
