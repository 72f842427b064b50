// The operator (generic flavour: no cloud IPAM); it registers Cilium's CRDs.
package main

import (
	"github.com/cilium/cilium/operator/cmd"
	"github.com/cilium/cilium/pkg/hive"
)

func main() { cmd.Execute(cmd.NewOperatorCmd(hive.New(cmd.Operator))) }
