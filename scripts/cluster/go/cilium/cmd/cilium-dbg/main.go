// The agent's command-line client (status, service list, bpf maps).
package main

import "github.com/cilium/cilium/cilium-dbg/cmd"

func main() { cmd.Execute() }
