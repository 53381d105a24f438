package allocator

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	berrors "go.etcd.io/bbolt/errors"
)

// Store failures come in three classes, and what a caller does differs:
//
//   - ErrStoreUnreadable (damage found at open): the file is not a usable
//     store: empty, truncated, not a bbolt file, a bad meta page or checksum,
//     a newer schema, a root page or meta bucket bbolt panics on. The daemon
//     sets it aside and rebuilds it; ADD refuses (CNI 11: the rebuild is on
//     its way); DEL treats it as nothing to release.
//   - ErrStorePageDamaged (damage met later): the store opened, but a page a
//     transaction then read is invalid (a leaf with a zeroed type, a cut
//     branch). bbolt only meets such a page when a transaction reads it, so
//     the plugin and the daemon see it at different times: an ADD that never
//     reads that page succeeds. So that the two never disagree about a store
//     (an ADD must not succeed on a store the daemon then replaces, losing the
//     allocation), this class never makes the daemon set a store aside or
//     rebuild it: the daemon reports it and reclaims nothing on that network;
//     the operator rebuilds (`hostlease-gc rebuild --force`). ADD refuses
//     when it meets it (CNI 5), DEL treats it as nothing to release.
//   - ErrStoreIO (the environment): the file could not be opened, locked,
//     read, written or synced because of the system, not the file: EROFS,
//     ENOSPC, EDQUOT, EMFILE, ENFILE, EACCES, EPERM, EIO, ENOMEM... It says
//     nothing about the store's content: never set aside or rebuild for it.
//     The plugin answers CNI 5 naming the errno and the path. A symlink in
//     place of the store file is in this class too (ELOOP): the store is
//     never opened through one.
//
// IsDamage and IsEnvironmentError test for the classes.
var (
	ErrStoreUnreadable  = errors.New("store unreadable")
	ErrStorePageDamaged = errors.New("store damaged")
	ErrStoreIO          = errors.New("store I/O error")
)

// IsDamage reports whether err says the store's content cannot be trusted
// (ErrStoreUnreadable or ErrStorePageDamaged).
func IsDamage(err error) bool {
	return errors.Is(err, ErrStoreUnreadable) || errors.Is(err, ErrStorePageDamaged)
}

// IsEnvironmentError reports whether err is an environment error (ErrStoreIO).
func IsEnvironmentError(err error) bool { return errors.Is(err, ErrStoreIO) }

// StoreIOError is an environment error on a store: Op on Path failed with
// Err, an errno when the system gave one. errors.Is(err, ErrStoreIO) holds,
// and so does errors.Is(err, Err) (e.g. syscall.EROFS, os.ErrNotExist).
type StoreIOError struct {
	Op   string
	Path string
	Err  error
}

// Error names the operation, the path, the system's message and the errno's
// symbolic name: "open /var/lib/cni/hostlease/net.db: read-only file system (EROFS)".
func (e *StoreIOError) Error() string {
	msg := fmt.Sprintf("%s %s: %v", e.Op, e.Path, e.Err)
	if errno := e.Errno(); errno != 0 {
		msg += " (" + ErrnoName(errno) + ")"
	}
	return msg
}

func (e *StoreIOError) Unwrap() error        { return e.Err }
func (e *StoreIOError) Is(target error) bool { return target == ErrStoreIO }

// Errno returns the system error number, or 0.
func (e *StoreIOError) Errno() syscall.Errno {
	var errno syscall.Errno
	if errors.As(e.Err, &errno) {
		return errno
	}
	return 0
}

// errnoNames are the symbolic names of the errnos a store operation meets.
var errnoNames = map[syscall.Errno]string{
	syscall.EROFS: "EROFS", syscall.ENOSPC: "ENOSPC", syscall.EDQUOT: "EDQUOT",
	syscall.EMFILE: "EMFILE", syscall.ENFILE: "ENFILE", syscall.EACCES: "EACCES",
	syscall.EPERM: "EPERM", syscall.EIO: "EIO", syscall.ENOMEM: "ENOMEM",
	syscall.ENOENT: "ENOENT", syscall.ELOOP: "ELOOP", syscall.ENOTDIR: "ENOTDIR",
	syscall.EISDIR: "EISDIR", syscall.ENAMETOOLONG: "ENAMETOOLONG", syscall.EEXIST: "EEXIST",
	syscall.EFBIG: "EFBIG", syscall.ENOLCK: "ENOLCK", syscall.EINVAL: "EINVAL",
	syscall.EAGAIN: "EAGAIN", syscall.EBADF: "EBADF", syscall.ENODEV: "ENODEV",
	syscall.ENXIO: "ENXIO", syscall.ETXTBSY: "ETXTBSY", syscall.ESTALE: "ESTALE",
	syscall.EOVERFLOW: "EOVERFLOW", syscall.EOPNOTSUPP: "EOPNOTSUPP",
}

// ErrnoName is errno's symbolic name ("EROFS"), or "errno N".
func ErrnoName(errno syscall.Errno) string {
	if n, ok := errnoNames[errno]; ok {
		return n
	}
	return fmt.Sprintf("errno %d", int(errno))
}

// classifyOpenError sorts an error of bolt.Open (or of opening and locking
// the file before it) into the classes above. Only bbolt's own verdicts on
// the file's bytes are damage; anything carrying an errno is the environment.
func classifyOpenError(path, op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrStoreUnreadable), errors.Is(err, ErrStorePageDamaged), errors.Is(err, ErrStoreIO):
		return err
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum),
		errors.Is(err, berrors.ErrVersionMismatch), errors.Is(err, berrors.ErrInvalidMapping):
		return fmt.Errorf("%w: %s: %v", ErrStoreUnreadable, path, err)
	}
	var errno syscall.Errno
	var pe *os.PathError
	var se *os.SyscallError
	if errors.As(err, &errno) || errors.As(err, &pe) || errors.As(err, &se) {
		return &StoreIOError{Op: op, Path: path, Err: unwrapPath(err)}
	}
	// bbolt's remaining open errors describe the file ("file size too small",
	// a meta page it cannot use).
	return fmt.Errorf("%w: %s: %v", ErrStoreUnreadable, path, err)
}

// classifyTxError sorts an error of beginning or committing a transaction:
// errnos are the environment; bbolt's verdicts on pages are damage.
func classifyTxError(path string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrStoreUnreadable), errors.Is(err, ErrStorePageDamaged), errors.Is(err, ErrStoreIO):
		return err
	}
	var errno syscall.Errno
	var pe *os.PathError
	var se *os.SyscallError
	if errors.As(err, &errno) || errors.As(err, &pe) || errors.As(err, &se) {
		return &StoreIOError{Op: "write", Path: path, Err: unwrapPath(err)}
	}
	return err
}

// unwrapPath drops an os.PathError's own path (StoreIOError names it) but
// keeps its errno.
func unwrapPath(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}
