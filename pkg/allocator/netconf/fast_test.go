package netconf

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// fastPathCases are configs aimed at the edges of decodeFast: each must
// decode exactly as json.Unmarshal decodes it (the fast path may decline it).
var fastPathCases = []string{
	`{"name":"n","ipam":{"type":"hostlease","subnet":"10.0.0.0/24"}}`,
	`{"name":"n","cniVersion":"1.0.0","type":"bridge","ipam":{"type":"hostlease","ranges":[[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.10","rangeEnd":"10.0.0.20","gateway":"10.0.0.1"}],[{"subnet":"fd00::/64"}]],"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0","gw":"fd00::1"}],"dataDir":"/d","resolvConf":"/r","lockTimeout":"3s","failStatusOnExhaustion":false}}`,
	`{"name":"n","ipam":{"type":"hostlease","ranges":[[{"subnet":"10.0.0.0/24"}]]},"prevResult":{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24","gateway":"10.0.0.1","interface":0}],"interfaces":[{"name":"eth0","mac":"00:11:22:33:44:55","sandbox":"/x"}],"dns":{},"x":[1,2.5,-3e2,true,false,null,"s",{"a":{"b":[]}}],"dup":1,"dup":2}}`,
	`{"name":"n","ipam":{"type":"hostlease","ranges":[[{"subnet":"10.0.0.0/24"}]]},"runtimeConfig":{"ips":["10.0.0.5","10.0.0.6/24"],"ipRanges":[[{"subnet":"10.1.0.0/24"}]],"portMappings":[{"hostPort":80}]},"args":{"cni":{"ips":["10.0.0.7"]},"other":{}}}`,
	`{"name":"n","cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"},{"containerID":"c2","ifname":"eth1","extra":1}],"cni.dev/attachments":[],"ipam":{"type":"hostlease","subnet":"10.0.0.0/24"}}`,
	`{"name":"n","type":"hostlease","dataDir":"/m"}`,
	// Empty arrays and objects: present but empty is not absent.
	`{"name":"n","ipam":{"type":"hostlease","ranges":[],"routes":[]},"runtimeConfig":{"ips":[],"ipRanges":[[]]},"args":{"cni":{}},"prevResult":{}}`,
	// Every field of every object the fast path reads, in another order
	// (TestDecodeFastReadsEveryField holds it to the types).
	`{"cni.dev/valid-attachments":[{"containerID":"c2","ifname":"net1"}],"args":{"cni":{"ips":["10.0.0.7"]}},"cni.dev/attachments":[{"ifname":"eth0","containerID":"c1"}],"dataDir":"/m","type":"bridge","runtimeConfig":{"ips":["10.0.0.8"],"ipRanges":[[{"subnet":"10.2.0.0/24","rangeStart":"10.2.0.5","rangeEnd":"10.2.0.9","gateway":"10.2.0.1"}]]},"cniVersion":"1.1.0","ipam":{"failStatusOnExhaustion":true,"lockTimeout":"1s","ranges":[[{"gateway":"10.0.0.1","subnet":"10.0.0.0/24","rangeStart":"10.0.0.2","rangeEnd":"10.0.0.200"}]],"resolvConf":"/r","dataDir":"/d","routes":[{"gw":"10.0.0.1","dst":"10.1.0.0/16"}],"type":"hostlease","Name":"x","gateway":"10.0.0.1","rangeEnd":"10.0.0.9","rangeStart":"10.0.0.3","subnet":"10.0.0.0/24"},"name":"n"}`,
	// Keys json.Unmarshal matches without regard to case, or twice.
	`{"Name":"n","ipam":{"type":"hostlease","subnet":"10.0.0.0/24"}}`,
	`{"name":"n","ipam":{"type":"hostlease","SUBNET":"10.0.0.0/24"}}`,
	`{"name":"n","ipam":{"type":"hostlease","ſubnet":"10.0.0.0/24"}}`,
	`{"name":"n","ipam":{"type":"hostlease","name":"x","subnet":"10.0.0.0/24"}}`,
	`{"name":"n","ipam":{"type":"hostlease","subnet":"10.0.0.0/24"},"ipam":{"rangeStart":"10.0.0.9"}}`,
	`{"name":"n","ipam":{"type":"hostlease","ranges":[[{"subnet":"10.0.0.0/24","subnet":"10.0.1.0/24"}]]}}`,
	`{"name":"a","name":"b","ipam":{"type":"hostlease","subnet":"10.0.0.0/24"}}`,
	// Nulls, other kinds, bad addresses, rarer route fields, trailing data.
	`{"name":"n","ipam":null}`,
	`{"name":"n","ipam":{"type":"hostlease","subnet":null}}`,
	`{"name":"n","ipam":{"type":"hostlease","subnet":"10.0.0.0/24","gateway":""}}`,
	`{"name":"n","ipam":{"type":"hostlease","subnet":"10.0.0.0/24","gateway":"nope"}}`,
	`{"name":"n","ipam":{"type":"hostlease","subnet":"10.0.0.0/33"}}`,
	`{"name":"n","ipam":{"type":"hostlease","subnet":"10.0.0.0/24","routes":[{"dst":"0.0.0.0/0","mtu":1400}]}}`,
	`{"name":"n","ipam":{"type":"hostlease","subnet":"10.0.0.0/24","routes":[null,{}]}}`,
	`{"name":"n","ipam":{"type":"hostlease","subnet":"10.0.0.0/24"},"runtimeConfig":{"ips":[null]}}`,
	`{"name":"n","ipam":{"type":"hostlease","subnet":"10.0.0.0/24"},"runtimeConfig":{"ips":["bad"]}}`,
	`{"name":"n","ipam":{"type":"hostlease","subnet":"10.0.0.0/24"},"prevResult":null}`,
	`{"name":"n","ipam":{"type":"hostlease","subnet":"10.0.0.0/24"},"prevResult":[1]}`,
	`{"name":"n","ipam":{"type":"hostlease","subnet":"10.0.0.0/24","failStatusOnExhaustion":"yes"}}`,
	`{"name":5}`, `null`, `[]`, `"s"`, ``, `{`, `{"name":"n"} x`, `{"name":"n"}  ` + "\n\t", `{"name":"n"}` + "\v",
	`{"name":"n\u00e9\ud83d\ude00","ipam":{"type":"hostlease","subnet":"10.0.0.0/24","resolvConf":"\u002fetc"}}`,
	// JSON's syntax in values the fast path skips, and strings it decodes
	// that are not plain ASCII.
	"{\"name\":\"n\",\"x\":\"a\x01b\",\"ipam\":{\"subnet\":\"10.0.0.0/24\"}}",
	`{"name":"n","x":[01],"ipam":{"subnet":"10.0.0.0/24"}}`,
	`{"name":"n","x":[1.],"ipam":{"subnet":"10.0.0.0/24"}}`,
	`{"name":"n","x":[1e],"ipam":{"subnet":"10.0.0.0/24"}}`,
	`{"name":"n","x":[-],"ipam":{"subnet":"10.0.0.0/24"}}`,
	`{"name":"n","x":[+1],"ipam":{"subnet":"10.0.0.0/24"}}`,
	`{"name":"n","x":[-0.5e+7,0,1E-2,true,false,null,"",{},[]],"ipam":{"subnet":"10.0.0.0/24"}}`,
	`{"name":"n","x":"\x41","ipam":{"subnet":"10.0.0.0/24"}}`,
	`{"name":"n","x":"\u00zz","ipam":{"subnet":"10.0.0.0/24"}}`,
	`{"name":"n","x":"\"\\\/\b\f\n\r\t\u00E9","ipam":{"subnet":"10.0.0.0/24"}}`,
	`{"name":"n","x":[1,],"ipam":{"subnet":"10.0.0.0/24"}}`,
	`{"name":"n","x":{"a":1,},"ipam":{"subnet":"10.0.0.0/24"}}`,
	`{"name":"n","x":tru,"ipam":{"subnet":"10.0.0.0/24"}}`,
	"{\"name\":\"n\xff\",\"ipam\":{\"subnet\":\"10.0.0.0/24\"}}",
	"{\"name\":\"n\u00e9\",\"ipam\":{\"subnet\":\"10.0.0.0/24\"}}",
	"{\"n\u00e9\":1,\"name\":\"n\",\"ipam\":{\"subnet\":\"10.0.0.0/24\"}}",
	`{"name":"n","x":{"deep":[[[{"y":null}]]]},"ipam":{"type":"hostlease","subnet":"10.0.0.0/24"}}`,
	`{"name":"n","prevResult":{"n":1e400},"ipam":{"type":"hostlease","subnet":"10.0.0.0/24"}}`,
}

// TestDecodeFastMatchesUnmarshal: wherever the fast path decodes a
// config, the result is exactly json.Unmarshal's; and it does decode the
// configs runtimes send (it is not silently declining everything).
func TestDecodeFastMatchesUnmarshal(t *testing.T) {
	confs := append([]string(nil), fastPathCases...)
	for _, in := range loaderCorpus() {
		confs = append(confs, in.conf)
	}
	taken := 0
	for i, conf := range confs {
		fast, ok := decodeFast([]byte(conf))
		want, err := decodeUnmarshal([]byte(conf))
		if !ok {
			continue
		}
		taken++
		if err != nil {
			t.Errorf("config %d %s: fast path decoded what json.Unmarshal refuses (%v)", i, conf, err)
			continue
		}
		if !reflect.DeepEqual(*fast, *want) {
			t.Errorf("config %d %s:\nfast path %s\nUnmarshal %s", i, conf, dump(fast), dump(want))
		}
	}
	t.Logf("fast path took %d of %d configs", taken, len(confs))
	for _, i := range []int{0, 1, 2, 3, 4, 5, 6, 7} {
		if _, ok := decodeFast([]byte(fastPathCases[i])); !ok {
			t.Errorf("fast path declined a common config: %s", fastPathCases[i])
		}
	}
	for _, c := range fastPathCases[8:] {
		if fast, ok := decodeFast([]byte(c)); ok && strings.Contains(c, "ſubnet") {
			t.Errorf("fast path took a key json.Unmarshal folds onto a field: %s -> %s", c, dump(fast))
		}
	}
}

// everyFieldCase is the fastPathCases entry that sets every field decode
// reads.
const everyFieldCase = 7

// TestDecodeFastReadsEveryField ties the fast path to the decoding types: the
// every-field config sets each JSON field of each type the reader reads (so a
// field added to a type must be added there), and the fast path takes that
// config (so it reads the new field too, or the DeepEqual comparison of
// TestDecodeFastMatchesUnmarshal fails, or it declines and this fails).
func TestDecodeFastReadsEveryField(t *testing.T) {
	conf := fastPathCases[everyFieldCase]
	var doc map[string]any
	if err := json.Unmarshal([]byte(conf), &doc); err != nil {
		t.Fatal(err)
	}
	obj := func(v any, path ...any) map[string]any {
		for _, p := range path {
			switch p := p.(type) {
			case string:
				v = v.(map[string]any)[p]
			case int:
				v = v.([]any)[p]
			}
		}
		return v.(map[string]any)
	}
	for _, c := range []struct {
		t    reflect.Type
		path []any
	}{
		{reflect.TypeFor[confJSON](), nil},
		{reflect.TypeFor[ipamJSON](), []any{"ipam"}},
		{reflect.TypeFor[rangeJSON](), []any{"ipam", "ranges", 0, 0}},
		{reflect.TypeFor[rangeJSON](), []any{"runtimeConfig", "ipRanges", 0, 0}},
		{reflect.TypeFor[runtimeConfJSON](), []any{"runtimeConfig"}},
		{reflect.TypeFor[argsJSON](), []any{"args"}},
		{reflect.TypeFor[cniArgsJSON](), []any{"args", "cni"}},
		{reflect.TypeFor[allocator.Attachment](), []any{"cni.dev/valid-attachments", 0}},
		{reflect.TypeFor[allocator.Attachment](), []any{"cni.dev/attachments", 0}},
	} {
		have := obj(doc, c.path...)
		for f := range c.t.Fields() {
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" {
				name = f.Name
			}
			if _, ok := have[name]; !ok && name != "-" {
				t.Errorf("fastPathCases[%d] sets no %q at %v (field %s.%s): add it", everyFieldCase, name, c.path, c.t.Name(), f.Name)
			}
		}
	}
	if _, ok := decodeFast([]byte(conf)); !ok {
		t.Errorf("the fast path declined the every-field config: a field it has no case for?")
	}
}

func dump(p *confJSON) string { return fmt.Sprintf("%#v ipam=%#v", *p, p.IPAM) }

// FuzzDecodeFast: on any input, wherever the fast path decodes, json.Unmarshal
// decodes the same value without error.
func FuzzDecodeFast(f *testing.F) {
	for _, c := range fastPathCases {
		f.Add([]byte(c))
	}
	for _, c := range acceptCases {
		f.Add([]byte(c.conf))
	}
	f.Fuzz(func(t *testing.T, conf []byte) {
		fast, ok := decodeFast(conf)
		if !ok {
			return
		}
		want, err := decodeUnmarshal(conf)
		if err != nil {
			t.Fatalf("fast path decoded what json.Unmarshal refuses (%v): %q", err, conf)
		}
		if !reflect.DeepEqual(*fast, *want) {
			t.Fatalf("%q:\nfast path %s\nUnmarshal %s", conf, dump(fast), dump(want))
		}
	})
}
