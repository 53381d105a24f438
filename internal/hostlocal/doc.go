// Package hostlocal is host-local's ipam config loader (LoadIPAMConfig and its
// range and range set types), copied verbatim from
// github.com/containernetworking/plugins v1.9.1
// (plugins/ipam/host-local/backend/allocator/{config,range,range_set}.go, and
// pkg/ip/{ip,cidr}.go as ./ip); only the package clauses and the ip import
// path differ. TestVerbatimCopy checks that against the module go.mod pins.
//
// Why a copy: importing host-local's allocator package pulls in
// plugins/pkg/ip, and with it netlink, netns, ethtool, go-iptables and
// knftables, whose package init (knftables compiles regexps) runs in every
// exec of the plugin though none of it is used. Dropping them halves the
// plugin's package-init time and shrinks the binary; see docs/benchmarks.md.
// Being the same source, the config's validation and error messages are
// host-local's exactly.
package hostlocal
