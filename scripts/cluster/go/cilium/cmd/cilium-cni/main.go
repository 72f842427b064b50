// The CNI plugin containerd calls; it asks the node's agent for the endpoint.
package main

import (
	"runtime"

	"github.com/containernetworking/cni/pkg/skel"
	cniversion "github.com/containernetworking/cni/pkg/version"

	"github.com/cilium/cilium/pkg/version"
	"github.com/cilium/cilium/plugins/cilium-cni/cmd"
)

func main() {
	runtime.LockOSThread() // the plugin switches network namespaces on this thread
	skel.PluginMainFuncs(cmd.NewCmd().CNIFuncs(),
		cniversion.PluginSupports("0.3.1", "0.4.0", "1.0.0"), "Cilium CNI plugin "+version.Version)
}
