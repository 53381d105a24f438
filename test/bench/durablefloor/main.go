// Command durablefloor is the durable exec floor of the plugin benchmarks:
// the least any crash-safe IPAM plugin does per call. It reads its stdin,
// takes an exclusive flock on a state file in the config's ipam.dataDir,
// writes one 4 KiB page and fdatasyncs it, then writes a second 4 KiB page
// (the "meta" page that would point at the first) and fdatasyncs again —
// the two ordered syncs of a copy-on-write commit such as bbolt's — prints a
// fixed result for ADD and exits. No CNI library and no config decoding
// beyond finding dataDir; raw syscalls (no Go poller).
package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

const result = `{
    "cniVersion": "1.0.0",
    "ips": [
        {
            "address": "10.0.0.2/16",
            "gateway": "10.0.0.1"
        }
    ]
}`

const pageSize = 4096

func main() {
	conf, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(err)
	}
	dir := dataDir(conf)
	if dir == "" {
		fail(syscall.EINVAL)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fail(err)
	}
	fd, err := syscall.Open(filepath.Join(dir, "durable-floor.db"), syscall.O_RDWR|syscall.O_CREAT|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		fail(err)
	}
	if err := syscall.Flock(fd, syscall.LOCK_EX); err != nil {
		fail(err)
	}
	var page [pageSize]byte
	copy(page[:], os.Getenv("CNI_COMMAND")+" "+os.Getenv("CNI_CONTAINERID"))
	// Data page first, made durable, then the page that commits it.
	for _, off := range []int64{2 * pageSize, 0} {
		if _, err := syscall.Pwrite(fd, page[:], off); err != nil {
			fail(err)
		}
		if err := syscall.Fdatasync(fd); err != nil {
			fail(err)
		}
	}
	syscall.Close(fd) // releases the lock
	if os.Getenv("CNI_COMMAND") == "ADD" {
		os.Stdout.WriteString(result)
	}
}

// dataDir finds the string value of the config's "dataDir" key (the
// benchmark's configs have one, unescaped).
func dataDir(conf []byte) string {
	const key = `"dataDir":"`
	i := bytes.Index(conf, []byte(key))
	if i < 0 {
		return ""
	}
	rest := conf[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

func fail(err error) {
	os.Stderr.WriteString(`{"cniVersion":"1.0.0","code":5,"msg":"` + err.Error() + `"}`)
	os.Exit(1)
}
