// Package trustfs is the one place that decides whether hostlease may trust a
// file or directory on the node, and the only way hostlease's binaries open,
// create and replace files in the directories they keep state in.
//
// The contract (DESIGN "No file another user controls"):
//
//   - A directory hostlease keeps or reads state in (the store's data dir,
//     host-local's <dataDir>/<network> directory) is opened with
//     O_DIRECTORY|O_NOFOLLOW: its last component is never a symbolic link.
//     Its ancestors are resolved as any path is: they are the operator's
//     (/var may be a link), and nothing is trusted because of them.
//   - That directory, and every file hostlease opens in it, is trusted only
//     when it is owned by the process's effective uid or by root, and is not
//     writable by group or others (a sticky world-writable directory such as
//     /tmp included: anyone may create names in it). ACLs are not read.
//   - Files in it are opened relative to the directory's descriptor (openat)
//     with O_NOFOLLOW and O_NONBLOCK, and must be regular files: a link
//     planted at a name is never followed, a directory swapped for a link
//     after it was opened is never entered, a FIFO never blocks.
//   - Once a directory is checked, nothing in it is done by path: every
//     create, link, rename, unlink and stat is relative to its descriptor
//     (the *at calls, never following a link at the name), so a directory
//     swapped for a link after the check is never entered.
//   - A file is put into place only through a Temp: a new file under a
//     random name created with O_CREAT|O_EXCL (never an existing name, never
//     through a link) in the checked directory, written, fsynced, and then
//     renamed over the final name (a link there is replaced, never written
//     through) or hard-linked to it (never replacing anything), the directory
//     fsynced after; an aborted Temp is unlinked.
//
// Anything else is refused with an *UntrustedError naming the path, its
// owner and mode, and the fix; errors.Is(err, ErrUntrusted) holds. Checking
// costs one open and one fstat of the directory, and one fstat per file.
package trustfs

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrUntrusted is matched (errors.Is) by every *UntrustedError.
var ErrUntrusted = errors.New("path not trusted")

// UntrustedError is a file or directory refused by the contract above.
// errors.Is(err, ErrUntrusted) holds, and so does errors.Is(err, Errno)
// (ELOOP for a symbolic link, EPERM for an owner or a mode, ENOTDIR or
// EINVAL for a file of the wrong type).
type UntrustedError struct {
	// Path is the refused path; Kind "directory" or "file".
	Path, Kind string
	// Reason says what is wrong: "is a symlink to ...", "is owned by uid
	// 65534", "is writable by group and others", "is not a regular file".
	Reason string
	// Stat says whether UID and Mode were read (not for a symbolic link).
	Stat bool
	UID  uint32
	// Mode is the permission bits, with setuid, setgid and sticky (07777).
	Mode uint32
	// Fix is what the operator does about it.
	Fix   string
	Errno syscall.Errno
}

func (e *UntrustedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s refused: it %s", e.Kind, e.Path, e.Reason)
	if e.Stat {
		fmt.Fprintf(&b, " (owner uid %d, mode %04o)", e.UID, e.Mode)
	}
	b.WriteString("; hostlease never follows a symlink there nor uses a file or directory another user owns or can write")
	if e.Fix != "" {
		b.WriteString("; fix: " + e.Fix)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrUntrusted) hold.
func (e *UntrustedError) Is(target error) bool { return target == ErrUntrusted }

// Unwrap is the errno the refusal stands for.
func (e *UntrustedError) Unwrap() error { return e.Errno }

// IsUntrusted reports whether err is (or wraps) a refusal of this package.
func IsUntrusted(err error) bool { return errors.Is(err, ErrUntrusted) }

// euid is the effective uid of this process; trusted owners are it and root.
var euid = uint32(os.Geteuid())

// Check judges the status st of path (a "directory" or a "file" as kind
// says) by the contract: the right type, owned by this process's user or
// root, not writable by group or others. nil when trusted.
func Check(path, kind string, st *unix.Stat_t) error {
	typ := st.Mode & unix.S_IFMT
	e := &UntrustedError{Path: path, Kind: kind, Stat: true, UID: st.Uid, Mode: st.Mode & 0o7777, Errno: syscall.EPERM}
	switch {
	case kind == "directory" && typ != unix.S_IFDIR:
		e.Reason, e.Errno = "is not a directory ("+typeName(typ)+")", syscall.ENOTDIR
		e.Fix = "move it away; hostlease creates the directory itself"
		return e
	case kind == "file" && typ != unix.S_IFREG:
		e.Reason, e.Errno = "is not a regular file ("+typeName(typ)+")", syscall.EINVAL
		e.Fix = "move it away"
		return e
	}
	var why []string
	if st.Uid != euid && st.Uid != 0 {
		why = append(why, fmt.Sprintf("is owned by uid %d, not by this process's uid %d or root", st.Uid, euid))
	}
	if w := st.Mode & 0o022; w != 0 {
		who := "group and others"
		switch w {
		case 0o020:
			who = "group"
		case 0o002:
			who = "others"
		}
		why = append(why, "is writable by "+who)
	}
	if len(why) == 0 {
		return nil
	}
	e.Reason = strings.Join(why, " and ")
	e.Fix = fixFor(path, kind, st)
	return e
}

// fixFor is the command that makes path trusted, with what to check first.
func fixFor(path, kind string, st *unix.Stat_t) string {
	var cmds []string
	if st.Uid != euid && st.Uid != 0 {
		cmds = append(cmds, fmt.Sprintf("chown %d %s", euid, path))
	}
	if st.Mode&0o022 != 0 {
		if kind == "directory" {
			cmds = append(cmds, fmt.Sprintf("chmod 0755 %s", path))
		} else {
			cmds = append(cmds, fmt.Sprintf("chmod go-w %s", path))
		}
	}
	fix := strings.Join(cmds, " && ")
	if kind == "directory" {
		return fix + " (or use a directory only uid " + fmt.Sprint(euid) + " can write; check what others may have put in it first)"
	}
	return fix + " once you know its content is hostlease's (another user may have planted it: if in doubt, move it away)"
}

// TypeName names the file type of a stat mode ("a symlink", "a regular
// file", "a socket", ...), as refusals do.
func TypeName(mode uint32) string { return typeName(mode & unix.S_IFMT) }

func typeName(typ uint32) string {
	switch typ {
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFLNK:
		return "a symlink"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	}
	return fmt.Sprintf("type %#o", typ)
}

// symlinkError refuses path, a symbolic link found where a directory or
// file (kind) was to be opened; target is what it points at.
func symlinkError(path, kind, target string) *UntrustedError {
	fix := "remove the link; hostlease creates the file itself"
	if kind == "directory" {
		fix = fmt.Sprintf("name the directory itself (%s) instead of the link, or replace the link with a directory", target)
	}
	return &UntrustedError{Path: path, Kind: kind, Reason: fmt.Sprintf("is a symlink to %q", target), Fix: fix, Errno: syscall.ELOOP}
}

// refusal explains an openat(dirfd, name, ...O_NOFOLLOW) failure errno on
// path: a symbolic link (ELOOP, or ENOTDIR with O_DIRECTORY), or a file of
// the wrong type or owner (ENXIO for a FIFO without a reader, EISDIR...),
// becomes an *UntrustedError; anything else an *os.PathError
// (errors.Is(err, fs.ErrNotExist) for ENOENT).
func refusal(dirfd int, name, path, kind string, errno error) error {
	var st unix.Stat_t
	if !errors.Is(errno, syscall.ENOENT) && unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			target, _ := readlinkat(dirfd, name)
			return symlinkError(path, kind, target)
		}
		if err := Check(path, kind, &st); err != nil {
			return err
		}
	}
	return &os.PathError{Op: "open", Path: path, Err: errno}
}

func readlinkat(dirfd int, name string) (string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// openat retries openat on EINTR.
func openat(dirfd int, name string, flag int, mode uint32) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flag|unix.O_CLOEXEC, mode)
		if !errors.Is(err, syscall.EINTR) {
			return fd, err
		}
	}
}

// Dir is a directory opened and checked by the contract; the files it
// opens are relative to its descriptor.
type Dir struct {
	fd   int
	path string
}

// OpenDir opens the directory at path without following a symbolic link at
// its last component, and checks it. A missing directory is an
// *os.PathError for which errors.Is(err, fs.ErrNotExist) holds.
func OpenDir(path string) (*Dir, error) {
	return openDirAt(unix.AT_FDCWD, path, path)
}

func openDirAt(dirfd int, name, path string) (*Dir, error) {
	fd, err := openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, refusal(dirfd, name, path, "directory", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if err := Check(path, "directory", &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &Dir{fd: fd, path: path}, nil
}

// MkdirOpen is OpenDir, creating the directory (with perm, as mkdir(2)
// does: a link or anything else already at path is not replaced) when it is
// missing. Its parent must exist.
func MkdirOpen(path string, perm os.FileMode) (*Dir, error) {
	d, err := OpenDir(path)
	if !errors.Is(err, os.ErrNotExist) {
		return d, err
	}
	if err := unix.Mkdir(path, uint32(perm.Perm())); err != nil && !errors.Is(err, syscall.EEXIST) {
		return nil, &os.PathError{Op: "mkdir", Path: path, Err: err}
	}
	return OpenDir(path)
}

// Path is the directory's path as it was opened.
func (d *Dir) Path() string { return d.path }

// Fd is the directory's descriptor, valid until Close.
func (d *Dir) Fd() int { return d.fd }

// Close closes the directory.
func (d *Dir) Close() error { return unix.Close(d.fd) }

func (d *Dir) join(name string) string { return d.path + "/" + name }

// Sub opens the subdirectory name of d by the contract, creating it with
// perm first when create is set and it is missing.
func (d *Dir) Sub(name string, create bool, perm os.FileMode) (*Dir, error) {
	sub, err := openDirAt(d.fd, name, d.join(name))
	if !create || !errors.Is(err, os.ErrNotExist) {
		return sub, err
	}
	if err := unix.Mkdirat(d.fd, name, uint32(perm.Perm())); err != nil && !errors.Is(err, syscall.EEXIST) {
		return nil, &os.PathError{Op: "mkdir", Path: d.join(name), Err: err}
	}
	return openDirAt(d.fd, name, d.join(name))
}

// OpenFile opens the file name in d by the contract: never through a
// symbolic link, never blocking on a FIFO, and only a regular file owned by
// this process's user or root and not writable by group or others. With
// O_CREAT in flag a missing file is created with mode 0600.
func (d *Dir) OpenFile(name string, flag int) (*os.File, error) {
	fd, err := openat(d.fd, name, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o600)
	if err != nil {
		return nil, refusal(d.fd, name, d.join(name), "file", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: d.join(name), Err: err}
	}
	if err := Check(d.join(name), "file", &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// Back to blocking I/O: O_NONBLOCK was for the open of a FIFO only.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fcntl", Path: d.join(name), Err: err}
	}
	return os.NewFile(uintptr(fd), d.join(name)), nil
}

// ReadFile reads the file name in d (OpenFile's rules), at most max bytes
// (more is an error: a state file hostlease reads is a line).
func (d *Dir) ReadFile(name string, max int64) ([]byte, error) {
	f, err := d.OpenFile(name, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: longer than %d bytes", d.join(name), max)
	}
	return b, nil
}

// Touch sets the modification time of the file name in d to now, creating
// it (mode 0600) when missing, by OpenFile's rules.
func (d *Dir) Touch(name string) error {
	f, err := d.OpenFile(name, unix.O_WRONLY|unix.O_CREAT)
	if err != nil {
		return err
	}
	defer f.Close()
	// futimens(fd, NULL): both times to now, on the file opened.
	if _, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, f.Fd(), 0, 0, 0, 0, 0); errno != 0 {
		return &os.PathError{Op: "futimens", Path: d.join(name), Err: errno}
	}
	return nil
}

// Lstat reports what is at name in d, without following a link.
func (d *Dir) Lstat(name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return st, &os.PathError{Op: "lstat", Path: d.join(name), Err: err}
	}
	return st, nil
}

// WriteFile replaces the file name in d with one holding data (mode perm),
// through a Temp named "."+name+".tmp-<16 random hex digits>": a reader sees
// the old file or the new one; a link at name is replaced, never written
// through. The directory is not fsynced (a writer of many files calls Sync
// once).
func (d *Dir) WriteFile(name string, data []byte, perm os.FileMode) error {
	t, err := d.CreateTemp("."+name+".tmp-", perm)
	if err != nil {
		return err
	}
	defer t.Abort()
	if _, err := t.File().Write(data); err != nil {
		return &os.PathError{Op: "write", Path: t.Path(), Err: err}
	}
	return t.commit(name, unix.Renameat, "rename", false)
}

// Sync fsyncs the directory: names linked, renamed or removed in it before
// survive a crash.
func (d *Dir) Sync() error {
	if err := unix.Fsync(d.fd); err != nil {
		return &os.PathError{Op: "fsync", Path: d.path, Err: err}
	}
	return nil
}

// Link makes newname in d a second name of the file oldname in d
// (linkat(2) without AT_SYMLINK_FOLLOW: a link at oldname is not followed).
// An existing newname, a link there included, is never replaced: the error
// then matches os.ErrExist.
func (d *Dir) Link(oldname, newname string) error {
	if err := unix.Linkat(d.fd, oldname, d.fd, newname, 0); err != nil {
		return &os.LinkError{Op: "link", Old: d.join(oldname), New: d.join(newname), Err: err}
	}
	return nil
}

// Remove removes the name name in d (unlinkat(2): a link there is removed
// itself; not a directory).
func (d *Dir) Remove(name string) error {
	if err := unix.Unlinkat(d.fd, name, 0); err != nil {
		return &os.PathError{Op: "remove", Path: d.join(name), Err: err}
	}
	return nil
}

// Readlink is the target of the symbolic link name in d.
func (d *Dir) Readlink(name string) (string, error) {
	target, err := readlinkat(d.fd, name)
	if err != nil {
		return "", &os.PathError{Op: "readlink", Path: d.join(name), Err: err}
	}
	return target, nil
}

// Info is Lstat as an os.FileInfo (Sys is the *unix.Stat_t): what is at name
// in d, without following a link. A missing name is an *os.PathError for
// which errors.Is(err, fs.ErrNotExist) holds.
func (d *Dir) Info(name string) (os.FileInfo, error) {
	st, err := d.Lstat(name)
	if err != nil {
		return nil, err
	}
	return &fileInfo{name: name, st: st}, nil
}

// SameFile reports whether st (an Lstat or Info of a name in a Dir) and fi
// (an os.File's Stat) are the same file: equal device and inode.
func SameFile(st *unix.Stat_t, fi os.FileInfo) bool {
	sys, ok := fi.Sys().(*syscall.Stat_t)
	return ok && uint64(sys.Dev) == uint64(st.Dev) && uint64(sys.Ino) == uint64(st.Ino)
}

type fileInfo struct {
	name string
	st   unix.Stat_t
}

func (fi *fileInfo) Name() string       { return fi.name }
func (fi *fileInfo) Size() int64        { return fi.st.Size }
func (fi *fileInfo) ModTime() time.Time { return time.Unix(fi.st.Mtim.Unix()) }
func (fi *fileInfo) IsDir() bool        { return fi.Mode().IsDir() }
func (fi *fileInfo) Sys() any           { return &fi.st }
func (fi *fileInfo) Mode() os.FileMode {
	m := os.FileMode(fi.st.Mode & 0o777)
	switch fi.st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= os.ModeDir
	case unix.S_IFLNK:
		m |= os.ModeSymlink
	case unix.S_IFIFO:
		m |= os.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= os.ModeSocket
	case unix.S_IFCHR:
		m |= os.ModeDevice | os.ModeCharDevice
	case unix.S_IFBLK:
		m |= os.ModeDevice
	}
	if fi.st.Mode&unix.S_ISUID != 0 {
		m |= os.ModeSetuid
	}
	if fi.st.Mode&unix.S_ISGID != 0 {
		m |= os.ModeSetgid
	}
	if fi.st.Mode&unix.S_ISVTX != 0 {
		m |= os.ModeSticky
	}
	return m
}

// Temp is a new file in a checked directory under a random name created
// exclusively: the one way hostlease puts a file into place. Its life:
// CreateTemp, write through File (or hand File's descriptor to whatever
// fills it), then exactly one of Rename or Link to commit it, or Abort.
// Commit fsyncs the file, puts it at its final name relative to the
// directory's descriptor and fsyncs the directory; Abort (also after a
// commit, so it may be deferred) unlinks the temporary name unless it was
// committed. Nothing is ever done by path.
type Temp struct {
	d    *Dir
	name string
	f    *os.File
	// gone: the temporary name no longer exists (committed or aborted).
	gone bool
}

// CreateTemp creates a new file prefix+"<16 random hex digits>" in d, open
// read-write, with mode perm: O_CREAT|O_EXCL|O_NOFOLLOW, so never an existing
// name and never through a link; other names are tried while one exists.
func (d *Dir) CreateTemp(prefix string, perm os.FileMode) (*Temp, error) {
	for try := 0; ; try++ {
		name := fmt.Sprintf("%s%016x", prefix, rand.Uint64())
		fd, err := openat(d.fd, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, uint32(perm.Perm()))
		if err == nil {
			return &Temp{d: d, name: name, f: os.NewFile(uintptr(fd), d.join(name))}, nil
		}
		if !errors.Is(err, syscall.EEXIST) || try == 100 {
			return nil, &os.PathError{Op: "create", Path: d.join(name), Err: err}
		}
	}
}

// File is the open temporary file (nil once Close was called).
func (t *Temp) File() *os.File { return t.f }

// Name is the temporary file's name in its directory.
func (t *Temp) Name() string { return t.name }

// Path is the temporary file's path as its directory was opened (for
// messages: nothing opens it by path).
func (t *Temp) Path() string { return t.d.join(t.name) }

// Close fsyncs and closes the file, which stays at its temporary name until
// a commit or Abort. A second Close does nothing.
func (t *Temp) Close() error {
	if t.f == nil {
		return nil
	}
	err := t.f.Sync()
	if cerr := t.f.Close(); err == nil {
		err = cerr
	}
	t.f = nil
	return err
}

// Rename commits t: Close, then rename it over name in its directory
// (renameat(2): whatever is at name, a link included, is replaced, never
// followed), then fsync the directory.
func (t *Temp) Rename(name string) error { return t.commit(name, unix.Renameat, "rename", true) }

// Link commits t where nothing may be replaced: Close, then hard-link it to
// name in its directory (linkat(2): an existing name, a link included, is
// left alone and the error matches os.ErrExist; t is then still to Abort),
// remove the temporary name and fsync the directory.
func (t *Temp) Link(name string) error {
	link := func(olddirfd int, oldname string, newdirfd int, newname string) error {
		return unix.Linkat(olddirfd, oldname, newdirfd, newname, 0)
	}
	return t.commit(name, link, "link", true)
}

func (t *Temp) commit(name string, put func(int, string, int, string) error, op string, sync bool) error {
	if t.gone {
		return &os.PathError{Op: op, Path: t.Path(), Err: os.ErrClosed}
	}
	if err := t.Close(); err != nil {
		return err
	}
	if err := put(t.d.fd, t.name, t.d.fd, name); err != nil {
		return &os.LinkError{Op: op, Old: t.Path(), New: t.d.join(name), Err: err}
	}
	if op == "link" {
		// The file has its final name: the temporary one goes.
		_ = unix.Unlinkat(t.d.fd, t.name, 0)
	}
	t.gone = true
	if sync {
		return t.d.Sync()
	}
	return nil
}

// Abort closes the file and removes its temporary name, unless it was
// committed (then it does nothing).
func (t *Temp) Abort() {
	if t.f != nil {
		t.f.Close()
		t.f = nil
	}
	if !t.gone {
		_ = unix.Unlinkat(t.d.fd, t.name, 0)
		t.gone = true
	}
}

// CheckFile checks an open file f (named path in errors) by the contract:
// a regular file owned by this process's user or root, not writable by
// group or others. It costs one fstat.
func CheckFile(f *os.File, path string) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	return Check(path, "file", &st)
}

// SymlinkError is the refusal of path, a symbolic link to target found where
// a "file" or a "directory" (kind) was to be opened.
func SymlinkError(path, kind, target string) error { return symlinkError(path, kind, target) }

// Entries lists the entries of d (not "." and ".."), with their types as
// the directory records them (a symlink is a symlink: nothing is followed).
func (d *Dir) Entries() ([]os.DirEntry, error) {
	fd, err := openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: d.path, Err: err}
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	return f.ReadDir(-1)
}
