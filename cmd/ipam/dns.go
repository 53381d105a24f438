package main

import (
	"os"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
)

// parseResolvConf reads nameserver, domain, search and options lines of a
// resolv.conf file into a CNI DNS result, as host-local's resolvConf option does.
func parseResolvConf(path string) (*types.DNS, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dns := &types.DNS{}
	for line := range strings.Lines(string(data)) {
		fields := strings.Fields(line)
		if len(fields) < 2 || strings.HasPrefix(fields[0], "#") || strings.HasPrefix(fields[0], ";") {
			continue
		}
		switch fields[0] {
		case "nameserver":
			dns.Nameservers = append(dns.Nameservers, fields[1])
		case "domain":
			dns.Domain = fields[1]
		case "search":
			dns.Search = append(dns.Search, fields[1:]...)
		case "options":
			dns.Options = append(dns.Options, fields[1:]...)
		}
	}
	return dns, nil
}
