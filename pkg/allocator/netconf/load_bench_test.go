package netconf

import "testing"

// benchConfigs are the configs a plugin exec parses: an ADD's bridge config
// with CNI_ARGS, the commit marker's entry with the chain's result, and one
// the token walk declines (a key in another case), decoded by json.Unmarshal.
var benchConfigs = []struct{ name, conf, cniArgs string }{
	{"add", `{"cniVersion":"1.0.0","name":"k8s-pod-network","type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":true,` +
		`"ipam":{"type":"hostlease","ranges":[[{"subnet":"10.244.1.0/24","rangeStart":"10.244.1.10","gateway":"10.244.1.1"}],[{"subnet":"fd00:10:244:1::/64"}]],` +
		`"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}],"dataDir":"/var/lib/cni/hostlease","lockTimeout":"5s"},` +
		`"runtimeConfig":{"portMappings":[]}}`,
		"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=0123456789abcdef;K8S_POD_UID=8c1e2a40-1d1f-4d8e-9b6e-0a1b2c3d4e5f"},
	{"marker", `{"cniVersion":"1.0.0","name":"k8s-pod-network","type":"hostlease","prevResult":{"cniVersion":"1.0.0",` +
		`"interfaces":[{"name":"cni0","mac":"aa:bb:cc:dd:ee:ff"},{"name":"veth1234","mac":"11:22:33:44:55:66"},{"name":"eth0","mac":"66:55:44:33:22:11","sandbox":"/var/run/netns/cni-1234"}],` +
		`"ips":[{"interface":2,"address":"10.244.1.17/24","gateway":"10.244.1.1"},{"interface":2,"address":"fd00:10:244:1::11/64","gateway":"fd00:10:244:1::1"}],` +
		`"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}],"dns":{}}}`, "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0"},
	{"fallback", `{"cniVersion":"1.0.0","name":"k8s-pod-network","type":"bridge","ipam":{"type":"hostlease","Ranges":[[{"subnet":"10.244.1.0/24"}]]}}`, ""},
}

func BenchmarkLoad(b *testing.B) {
	for _, bc := range benchConfigs {
		b.Run(bc.name, func(b *testing.B) {
			stdin := []byte(bc.conf)
			if _, err := Load(stdin, bc.cniArgs); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Load(stdin, bc.cniArgs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
