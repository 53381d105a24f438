// Command hostlease is a CNI IPAM plugin that is a drop-in replacement for
// host-local, keeping its reservations in a durable bbolt store with the pod
// and chain state an operator and the hostlease-gc daemon need.
//
// Placed as the last plugin of a conflist with no ipam section, the same binary
// is the commit marker: reaching it proves the whole chain's ADD succeeded.
package main

import (
	"log"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"
	// One P from early initialisation: see the package's doc.
	_ "github.com/hostlease/hostlease/internal/oneproc"
	"github.com/hostlease/hostlease/pkg/allocator/netconf"
)

// buildVersion is set with -ldflags "-X main.buildVersion=...".
var buildVersion = "dev"

func main() {
	// Installed under another name, the marker entry's type is that name;
	// installed as host-local (a drop-in), a top-level "type": "host-local"
	// without ipam stays host-local's error, never a marker.
	if name := filepath.Base(os.Args[0]); name != "hostlease" && name != "host-local" && name != "." {
		netconf.MarkerTypes = append(netconf.MarkerTypes, name)
	}
	netnsCheck := takeOverNetnsCheck()
	e := skel.PluginMainFuncsWithError(skel.CNIFuncs{
		Add:    cmdAdd,
		Del:    cmdDel,
		Check:  cmdCheck,
		GC:     cmdGC,
		Status: cmdStatus,
	}, version.All, "hostlease "+buildVersion+" (CNI IPAM, host-local compatible)")
	if e == nil && netnsCheck != nil {
		e = netnsCheck()
	}
	if e != nil {
		// As skel.PluginMainFuncs: the error as JSON on stdout, exit 1.
		if err := e.Print(); err != nil {
			log.Print("Error writing error JSON to stdout: ", err)
		}
		os.Exit(1)
	}
}
