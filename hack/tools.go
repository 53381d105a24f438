//go:build tools

// Package hack pins the modules that tests and scripts build as real peers
// (host-local, bridge, loopback) so `go build` of them uses go.mod's versions.
package hack

import (
	_ "github.com/containernetworking/cni/libcni"
	_ "github.com/containernetworking/cni/pkg/skel"
	_ "github.com/containernetworking/plugins/pkg/ip"
	_ "github.com/containernetworking/plugins/pkg/ns"
	_ "github.com/containernetworking/plugins/pkg/testutils"
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/client_golang/prometheus/testutil"
	_ "go.etcd.io/bbolt"
	_ "google.golang.org/grpc"
	_ "k8s.io/apimachinery/pkg/runtime/serializer/json"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/kubernetes/fake"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/client-go/tools/record"
	_ "k8s.io/cri-api/pkg/apis/runtime/v1"
)
