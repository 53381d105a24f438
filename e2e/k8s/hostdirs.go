package k8s

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// hostDirs are the host dirs kubelet creates whatever its flags say; every
// instance's kubelet shares them.
var hostDirs = []string{"/var/lib/kubelet", "/var/log/containers"}

// hostDirsRecord lists the hostDirs that did not exist when an instance
// started: the instances' kubelets created them, and the last instance to
// stop removes them and the record. It lives beside the instances' Roots,
// in none of them.
const hostDirsRecord = "/tmp/hostlease-k8s.created-host-dirs"

// lockHostDirsRecord opens hostDirsRecord (created if absent, links not
// followed) and locks it exclusively, proving that the locked file is the
// one at the path: an instance removing the record unlinks it under the
// lock, so a file opened before that is retried.
func lockHostDirsRecord() (*os.File, error) {
	for {
		f, err := os.OpenFile(hostDirsRecord, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, err
		}
		var locked, atPath syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &locked); err != nil {
			f.Close()
			return nil, err
		}
		if err := syscall.Lstat(hostDirsRecord, &atPath); err == nil && atPath.Dev == locked.Dev && atPath.Ino == locked.Ino {
			return f, nil
		}
		f.Close()
	}
}

// readHostDirsRecord returns the dirs f lists.
func readHostDirsRecord(f *os.File) ([]string, error) {
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<20))
	return strings.Fields(string(b)), err
}

// recordHostDirs adds to hostDirsRecord every hostDir that does not exist
// now. Called once this instance's owner.pid is written, so that an
// instance stopping from then on sees it live and leaves the dirs.
func recordHostDirs() error {
	f, err := lockHostDirsRecord()
	if err != nil {
		return err
	}
	defer f.Close()
	listed, err := readHostDirsRecord(f)
	if err != nil {
		return err
	}
	for _, d := range hostDirs {
		if _, err := os.Lstat(d); os.IsNotExist(err) && !slices.Contains(listed, d) {
			listed = append(listed, d)
		}
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err = f.WriteAt([]byte(strings.Join(listed, "\n")+"\n"), 0)
	return err
}

// removeHostDirs removes the dirs hostDirsRecord lists, and the record,
// unless another instance is live (it removes them when it stops).
func removeHostDirs(logf func(string, ...any)) {
	if _, err := os.Lstat(hostDirsRecord); err != nil {
		return
	}
	f, err := lockHostDirsRecord()
	if err != nil {
		logf("host dirs record: %v", err)
		return
	}
	defer f.Close()
	if root, pid := otherLiveInstance(); pid != 0 {
		logf("leaving the host dirs kubelet created to %s (process %d)", root, pid)
		return
	}
	listed, err := readHostDirsRecord(f)
	if err != nil {
		logf("host dirs record: %v", err)
		return
	}
	for _, d := range listed {
		if !slices.Contains(hostDirs, d) {
			logf("host dirs record lists %s, not one of %v: left alone", d, hostDirs)
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			logf("remove %s: %v", d, err)
		}
	}
	if err := os.Remove(hostDirsRecord); err != nil {
		logf("remove %s: %v", hostDirsRecord, err)
	}
}

// otherLiveInstance returns the Root and owner of a live instance other than
// this process (0 if there is none): any /tmp/hostlease-k8s or
// /tmp/hostlease-k8s-* whose owner.pid names a live process.
func otherLiveInstance() (string, int) {
	roots, _ := filepath.Glob(instancePathGlob)
	for _, r := range append([]string{defaultRoot}, roots...) {
		b, err := os.ReadFile(filepath.Join(r, "owner.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 1 || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == nil {
			return r, pid
		}
	}
	return "", 0
}

// defaultRoot is the default node's Root; instancePathGlob matches every
// other instance's.
const (
	defaultRoot      = "/tmp/hostlease-k8s"
	instancePathGlob = defaultRoot + "-*"
)
