package k8s

import "strings"

// What a failure Event blames. The real-node suite fails on what the plugin
// or the daemon caused and reports, without failing, a runtime's own error
// that names no network or plugin (a shim's "ttrpc: closed" while a loaded
// node kills a container): such an error says something about the machine,
// not about hostlease, and a test that fails on it is red for the machine.

// cniMarks are the words kubelet's and the runtimes' messages carry when a
// CNI operation failed: containerd's "failed to setup network for sandbox"
// and "failed to destroy network for sandbox", libcni's `plugin
// type="bridge" failed (add)`, CRI-O's "error adding pod ... to CNI network"
// and "CNI network", and any message naming the plugin or its files.
var cniMarks = []string{
	"network for sandbox",
	"plugin type=",
	"cni",
	"network plugin",
	"hostlease",
	"ipam",
	"no ip addresses available",
	"text file busy",
	"exec format error",
}

// blamesNetwork reports whether a failure Event's message names a network,
// a CNI plugin or the plugin's binary: the failures a hostlease defect can
// cause (a failed ADD or DEL, a partial binary, an exhausted pool). Every
// other failure is the runtime's own.
func blamesNetwork(message string) bool {
	m := strings.ToLower(message)
	for _, w := range cniMarks {
		if strings.Contains(m, w) {
			return true
		}
	}
	return false
}

// failureEvent is one Event of a reason that means a pod could not be set up
// or torn down.
type failureEvent struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// splitBlame splits failure Events into those that blame a network or plugin
// (a test fails on them) and the runtime's own (reported only).
func splitBlame(evs []failureEvent) (network, runtime []failureEvent) {
	for _, ev := range evs {
		if blamesNetwork(ev.Message) {
			network = append(network, ev)
		} else {
			runtime = append(runtime, ev)
		}
	}
	return network, runtime
}
