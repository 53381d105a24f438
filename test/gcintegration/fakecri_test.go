package gcintegration

import (
	"testing"

	"github.com/hostlease/hostlease/internal/testing/fakecri"
)

// The fake runtime and its vocabulary, under the names these tests use.
type (
	fakeCRI     = fakecri.Server
	fakeSandbox = fakecri.Sandbox
)

const (
	listNormal = fakecri.ListNormal
	listFail   = fakecri.ListFail
	listHang   = fakecri.ListHang
	listEmpty  = fakecri.ListEmpty
)

// startFakeCRI serves a fake runtime until the test ends.
func startFakeCRI(t testing.TB) *fakeCRI { return fakecri.StartForTest(t) }
