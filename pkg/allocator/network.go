package allocator

// Default directories. The store lives apart from host-local's state unless
// the config names a dataDir, in which case both live under it (see
// HostLocalBaseFor).
const (
	DefaultStoreDir     = "/var/lib/cni/hostlease"
	DefaultHostLocalDir = "/var/lib/cni/networks"
)

// ValidNetworkName reports whether name follows CNI's network name rule
// (letters, digits, '_', '.', '-'; starting with a letter or digit). The name
// becomes a store file's and a host-local directory's name, so anything else
// could escape the data dir.
func ValidNetworkName(name string) bool {
	ok := name != ""
	for i := 0; ok && i < len(name); i++ {
		ch := name[i]
		alnum := ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9'
		ok = alnum || i > 0 && (ch == '_' || ch == '.' || ch == '-')
	}
	return ok
}
