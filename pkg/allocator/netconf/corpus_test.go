package netconf

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
)

// corpusInput is one config of the loader corpus with its CNI_ARGS.
type corpusInput struct{ name, conf, cniArgs string }

// loaderCorpus is every config the loader tests run: LoadConfig's own accept
// and reject cases, the hand-written corner cases (of the schema, and of JSON:
// fastPathCases), and a generated corpus.
func loaderCorpus() []corpusInput {
	type input = corpusInput
	var corpus []input
	for _, c := range acceptCases {
		corpus = append(corpus, input{"accept/" + c.name, c.conf, c.cniArgs})
	}
	for _, c := range rejectCases {
		corpus = append(corpus, input{"reject/" + c.name, c.conf, c.cniArgs})
	}
	for i, c := range cornerCases {
		corpus = append(corpus, input{fmt.Sprintf("corner/%d", i), c[0], c[1]})
	}
	for i, c := range fastPathCases {
		corpus = append(corpus, input{fmt.Sprintf("json/%d", i), c, ""})
	}
	// HOSTLEASE_ORACLE_SEED and HOSTLEASE_ORACLE_N run another or a longer
	// generated corpus (e.g. a soak run before a release).
	seed, generated := uint64(20240611), 6000
	if v, err := strconv.ParseUint(os.Getenv("HOSTLEASE_ORACLE_SEED"), 10, 64); err == nil {
		seed = v
	}
	if v, err := strconv.Atoi(os.Getenv("HOSTLEASE_ORACLE_N")); err == nil && v > 0 {
		generated = v
	}
	g := &confGen{r: rand.New(rand.NewPCG(seed, 7))}
	for i := range generated {
		conf, args := g.config()
		corpus = append(corpus, input{fmt.Sprintf("generated/%d", i), conf, args})
	}
	return corpus
}

// cornerCases are {stdin, CNI_ARGS} pairs aimed at the loader's edges.
var cornerCases = func() [][2]string {
	wrap := func(ipam string) string {
		return `{"cniVersion":"1.0.0","name":"net1","type":"bridge","ipam":{"type":"hostlease",` + ipam + `}}`
	}
	rs := func(ranges string) string { return wrap(`"ranges":` + ranges) }
	ok := rs(`[[{"subnet":"10.0.0.0/24"}],[{"subnet":"fd00::/120"}]]`)
	c := [][2]string{
		// 4in6 subnets, addresses and requests.
		{rs(`[[{"subnet":"::ffff:10.0.0.0/104"}]]`), ""},
		{rs(`[[{"subnet":"::ffff:10.0.0.0/120"}]]`), ""},
		{rs(`[[{"subnet":"::ffff:10.0.0.0/127"}]]`), ""},
		{rs(`[[{"subnet":"::ffff:10.0.0.1/128"}]]`), ""},
		{rs(`[[{"subnet":"::ffff:0:0/96"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","rangeStart":"::ffff:10.0.0.9","rangeEnd":"::ffff:10.0.0.20","gateway":"::ffff:10.0.0.254"}]]`), ""},
		{rs(`[[{"subnet":"fd00::/120","rangeStart":"::ffff:10.0.0.9"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","rangeStart":"fd00::1"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.5","rangeEnd":"fd00::1"}]]`), ""},
		{ok, "IP=::ffff:10.0.0.5"},
		{ok, "IP=10.0.0.5/24"},
		{ok, "IP=10.0.0.5/"},
		// Missing, null and empty values.
		{rs(`[[{"subnet":null}]]`), ""},
		{rs(`[[{"subnet":""}]]`), ""},
		{rs(`[[{}]]`), ""},
		{rs(`[[null]]`), ""},
		{rs(`[null]`), ""},
		{rs(`null`), ""},
		{rs(`[]`), ""},
		{wrap(`"rangeStart":"10.0.0.5","ranges":[[{"subnet":"10.1.0.0/24"}]]`), ""},
		{wrap(`"subnet":"10.0.0.0/24","gateway":null,"rangeStart":"","rangeEnd":null`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","gateway":""}]]`), ""},
		{`{"cniVersion":"1.0.0","name":"net1","ipam":null}`, ""},
		{`{"cniVersion":"1.0.0","name":"net1"}`, ""},
		{`{"cniVersion":"1.0.0","name":"net1","ipam":{}}`, ""},
		{`null`, ""},
		{`[]`, ""},
		{`{}`, ""},
		{`{"cniVersion":"1.0.0","name":"net1","ipam":{"subnet":"10.0.0.0/24"},"runtimeConfig":null,"args":null}`, ""},
		{`{"cniVersion":"1.0.0","name":"net1","ipam":{"subnet":"10.0.0.0/24"},"args":{"cni":null}}`, ""},
		{`{"cniVersion":"1.0.0","name":"net1","ipam":{"subnet":"10.0.0.0/24"},"args":{"cni":{"ips":null}}}`, ""},
		{`{"cniVersion":"1.0.0","name":"net1","ipam":{"subnet":"10.0.0.0/24"},"args":{"cni":5}}`, ""},
		{`{"cniVersion":"1.0.0","name":"net1","ipam":{"subnet":"10.0.0.0/24"},"runtimeConfig":5}`, ""},
		{`{"cniVersion":"1.0.0","name":"net1","ipam":{"subnet":"10.0.0.0/24"},"runtimeConfig":{"ips":[""]}}`, ""},
		{`{"cniVersion":"1.0.0","name":"net1","ipam":{"subnet":"10.0.0.0/24"},"args":{"cni":{"ips":[""]}},"runtimeConfig":{"ips":[null]}}`, ""},
		{`{"cniVersion":"1.0.0","name":"net1","ipam":{"subnet":"10.0.0.0/24"},"args":{"cni":{"ips":["10.0.0.5/33"]}}}`, ""},
		{`{"cniVersion":"1.0.0","name":"net1","ipam":{"subnet":"10.0.0.0/24"},"args":{"cni":{"ips":[null]}}}`, "IP=x"},
		// Range bounds.
		{rs(`[[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.20","rangeEnd":"10.0.0.10"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","rangeEnd":"10.0.0.0"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.0","rangeEnd":"10.0.0.255"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.7","rangeEnd":"10.0.0.7"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/30"}],[{"subnet":"fd00::/126"}]]`), ""},
		{rs(`[[{"subnet":"0.0.0.0/0"}]]`), ""},
		{rs(`[[{"subnet":"255.255.255.252/30"}]]`), ""},
		{rs(`[[{"subnet":"::/0"}]]`), ""},
		{rs(`[[{"subnet":"ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffc/126"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/8","rangeStart":"10.200.3.4","rangeEnd":"10.255.255.255"}]]`), ""},
		{rs(`[[{"subnet":"fd00:1::/64","rangeEnd":"fd00:1::ffff:ffff:ffff:ffff"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","gateway":"fd00::1"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","gateway":"192.168.1.1"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.1","rangeEnd":"10.0.0.100"},{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.101"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.1","rangeEnd":"10.0.0.100"},{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.100"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","rangeEnd":"10.0.0.100"}],[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.101"}]]`), ""},
		// A rangeStart past the default rangeEnd (the broadcast address) is
		// accepted; such a range overlaps one holding either of its ends.
		{rs(`[[{"subnet":"10.0.0.192/30","rangeStart":"10.0.0.195"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.192/30","rangeStart":"10.0.0.195"}],[{"subnet":"10.0.0.0/24","rangeEnd":"10.0.0.194"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","rangeEnd":"10.0.0.194"}],[{"subnet":"10.0.0.192/30","rangeStart":"10.0.0.195"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.192/30","rangeStart":"10.0.0.195"},{"subnet":"10.0.0.0/24","rangeEnd":"10.0.0.194"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.192/30","rangeStart":"10.0.0.195"}],[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.196"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24"}],[{"subnet":"fd00::/64"},{"subnet":"10.1.0.0/24"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24"},{"subnet":"fd00::/64"},{"subnet":"10.0.0.0/33"}]]`), ""},
		// Family counts and versions.
		{`{"cniVersion":"0.2.0","name":"n","ipam":{"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"fd00::/64"}]]}}`, ""},
		{`{"cniVersion":"0.2.0","name":"n","ipam":{"ranges":[[{"subnet":"fd01::/64"}],[{"subnet":"fd00::/64"}]]}}`, ""},
		{`{"cniVersion":"0.1.0","name":"n","ipam":{"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"10.1.0.0/24"}]]}}`, ""},
		{`{"cniVersion":"0.3.0","name":"n","ipam":{"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"10.1.0.0/24"}]]}}`, ""},
		{`{"name":"n","ipam":{"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"10.1.0.0/24"}]]}}`, ""},
		{`{"cniVersion":"abc","name":"n","ipam":{"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"10.1.0.0/24"}]]}}`, ""},
		{`{"cniVersion":"0.2.0","name":"n","ipam":{"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"10.0.0.0/24"}]]}}`, ""},
		// JSON: key case, duplicates, types, and fatal errors after saved ones.
		{wrap(`"Subnet":"10.0.0.0/24","RANGESTART":"10.0.0.9"`), ""},
		{wrap(`"RANGES":[[{"SUBNET":"10.0.0.0/24","Gateway":"10.0.0.3"}]]`), ""},
		{wrap(`"subnet":"10.0.0.0/24","subnet":"10.1.0.0/24"`), ""},
		{wrap(`"subnet":"10.0.0.0/24","subnet":"x"`), ""},
		{wrap(`"subnet":"10.0.0.0/24","name":5`), ""},
		{wrap(`"subnet":"10.0.0.0/24","Name":"x","IPArgs":["10.0.0.1"],"Range":5`), ""},
		{wrap(`"resolvConf":5,"subnet":"bad"`), ""},
		{wrap(`"resolvConf":5,"subnet":"10.0.0.0/24"`), ""},
		{wrap(`"subnet":"10.0.0.0/24","rangeStart":[1]`), ""},
		{wrap(`"subnet":"10.0.0.0/24","rangeStart":{}`), ""},
		{wrap(`"subnet":["10.0.0.0/24"]`), ""},
		{wrap(`"subnet":{"ip":"10.0.0.0"}`), ""},
		{wrap(`"subnet":true`), ""},
		{wrap(`"ranges":[[{"subnet":"10.0.0.0/24","gateway":false}]],"type":7`), ""},
		{wrap(`"ranges":[{"subnet":"10.0.0.0/24"}]`), ""},
		{wrap(`"ranges":{"subnet":"10.0.0.0/24"}`), ""},
		// Routes.
		{wrap(`"subnet":"10.0.0.0/24","routes":[null]`), ""},
		{wrap(`"subnet":"10.0.0.0/24","routes":[5]`), ""},
		{wrap(`"subnet":"10.0.0.0/24","routes":[{"dst":"10.0.0.0/8","mtu":"x"}]`), ""},
		{wrap(`"subnet":"10.0.0.0/24","routes":[{"dst":"10.0.0.0/8","gw":"x"}]`), ""},
		{wrap(`"subnet":"10.0.0.0/24","routes":[{"dst":"10.1.0.1/16","gw":"10.0.0.1","mtu":1400,"advmss":1300,"priority":5,"table":100,"scope":0}]`), ""},
		{wrap(`"subnet":"10.0.0.0/24","routes":[{}]`), ""},
		// CNI_ARGS.
		{ok, "CommonArgs=1"},
		{ok, "IgnoreUnknown=1;CommonArgs=1"},
		{ok, "IP=10.0.0.5;IP="},
		{ok, "IP=10.0.0.5;IP=10.0.0.6"},
		{ok, "IP="},
		{ok, "ip=10.0.0.5"},
		{ok, "IgnoreUnknown=1;IgnoreUnknown=0;X=1"},
		{ok, "IgnoreUnknown=True;X=1"},
		{ok, "IgnoreUnknown=false;X=1"},
		{ok, "K8S_POD_NAME=a=b"},
		{ok, ";"},
		{ok, "IgnoreUnknown=1;"},
		{ok, "IP=fd00::5;IgnoreUnknown=1;K8S_POD_NAMESPACE=x"},
		{ok, "IgnoreUnknown=1;IP=10.0.0.5;IgnoreUnknown=0"},
		{`not json`, "IP=x"},
	}
	return c
}()
