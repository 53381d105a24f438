package store

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	berrors "go.etcd.io/bbolt/errors"
	"golang.org/x/sys/unix"
)

// Store failures come in four classes, and what a caller does differs:
//
//   - ErrUnreadable (damage found at open): the file is not a usable
//     store: empty, truncated, not a bbolt file, a bad meta page or checksum,
//     a root page or meta bucket bbolt panics on, a damaged entry of the
//     root page that no open repairs in place (roots.go). The daemon
//     sets it aside and rebuilds it; ADD refuses (CNI 11: the rebuild is on
//     its way); DEL treats it as nothing to release.
//   - ErrPageDamaged (damage met later): the store opened, but a page a
//     transaction then read is invalid (a leaf with a zeroed type, a cut
//     branch). bbolt only meets such a page when a transaction reads it, so
//     the plugin and the daemon see it at different times: an ADD that never
//     reads that page succeeds. So that the two never disagree about a store
//     (an ADD must not succeed on a store the daemon then replaces, losing the
//     allocation), this class never makes the daemon set a store aside or
//     rebuild it: the daemon reports it and reclaims nothing on that network;
//     the operator rebuilds (`hostlease-gc rebuild --force`). ADD refuses
//     when it meets it (CNI 5), DEL treats it as nothing to release.
//   - ErrIO (the environment): the file could not be opened, locked,
//     read, written or synced because of the system, not the file: EROFS,
//     ENOSPC, EDQUOT, EMFILE, ENFILE, EACCES, EPERM, EIO, ENOMEM... It says
//     nothing about the store's content: never set aside or rebuild for it.
//     The plugin answers CNI 5 naming the errno and the path. A path
//     refused as ErrUntrusted is in this class too (trust.go): a symlink in
//     place of the store file (ELOOP: the store is never opened through
//     one), a store file or data dir another user owns or can write.
//   - ErrSchema (another layout): the file is a store, but its meta
//     names another schema than SchemaVersion (an older binary's, or a newer
//     one's after a downgrade). Its records may be intact, so it is
//     never set aside nor rebuilt (that would drop them): the daemon reports
//     it and skips the network; ADD, CHECK and STATUS refuse (CNI 5 / 50,
//     naming both schemas); DEL treats it as nothing it can release (exit 0,
//     logged: the daemon of the matching version reclaims what leaks); the
//     CLI reports it and exits non-zero. The operator runs the matching
//     binary. A *SchemaError says which schema was found.
//
// IsDamage and IsEnvironmentError test for the classes.
var (
	ErrUnreadable  = errors.New("store unreadable")
	ErrPageDamaged = errors.New("store damaged")
	ErrIO          = errors.New("store I/O error")
	ErrSchema      = errors.New("store schema not supported")
)

// SchemaError is a store of another schema than this binary's (Found).
// errors.Is(err, ErrSchema) holds.
type SchemaError struct {
	Path  string
	Found int
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("%s: %s has schema %d; this binary reads schema %d only (the store is left as it is: it is not damage; run the hostlease version that wrote it)",
		ErrSchema, e.Path, e.Found, SchemaVersion)
}

func (e *SchemaError) Is(target error) bool { return target == ErrSchema }

// IsDamage reports whether err says the store's content cannot be trusted
// (ErrUnreadable or ErrPageDamaged).
func IsDamage(err error) bool {
	return errors.Is(err, ErrUnreadable) || errors.Is(err, ErrPageDamaged)
}

// IsEnvironmentError reports whether err is an environment error (ErrIO, or
// a path refused as ErrUntrusted).
func IsEnvironmentError(err error) bool { return errors.Is(err, ErrIO) || errors.Is(err, ErrUntrusted) }

// IOError is an environment error on a store: Op on Path failed with
// Err, an errno when the system gave one. errors.Is(err, ErrIO) holds,
// and so does errors.Is(err, Err) (e.g. syscall.EROFS, os.ErrNotExist).
type IOError struct {
	Op   string
	Path string
	Err  error
}

// Error names the operation, the path, the system's message and the errno's
// symbolic name: "open /var/lib/cni/hostlease/net.db: read-only file system (EROFS)".
func (e *IOError) Error() string {
	msg := fmt.Sprintf("%s %s: %v", e.Op, e.Path, e.Err)
	if errno := e.Errno(); errno != 0 {
		msg += " (" + ErrnoName(errno) + ")"
	}
	return msg
}

func (e *IOError) Unwrap() error        { return e.Err }
func (e *IOError) Is(target error) bool { return target == ErrIO }

// Errno returns the system error number, or 0.
func (e *IOError) Errno() syscall.Errno {
	var errno syscall.Errno
	if errors.As(e.Err, &errno) {
		return errno
	}
	return 0
}

// ErrnoName is errno's symbolic name ("EROFS", x/sys/unix's table), or
// "errno N" for a number the table does not know.
func ErrnoName(errno syscall.Errno) string {
	if n := unix.ErrnoName(errno); n != "" {
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
	case errors.Is(err, ErrUnreadable), errors.Is(err, ErrPageDamaged), errors.Is(err, ErrIO), errors.Is(err, ErrSchema),
		errors.Is(err, ErrUntrusted):
		return err
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum),
		errors.Is(err, berrors.ErrVersionMismatch), errors.Is(err, berrors.ErrInvalidMapping):
		return fmt.Errorf("%w: %s: %v", ErrUnreadable, path, err)
	}
	if isSystemError(err) {
		return &IOError{Op: op, Path: path, Err: systemError(err)}
	}
	// bbolt's remaining open errors describe the file ("file size too small",
	// a meta page it cannot use).
	return fmt.Errorf("%w: %s: %v", ErrUnreadable, path, err)
}

// bboltSystemErrors are the prefixes of bbolt errors that report a failed
// system call with %s (the errno is lost from the chain, kept in the text).
var bboltSystemErrors = []string{"file resize error", "file sync error", "mmap allocate error",
	"mlock", "munlock", "madvise", "unmap error", "file stat error", "meta 0 copy", "meta 1 copy"}

// isSystemError reports whether err comes from a system call: an errno in
// its chain, or one of bbolt's errors that print the errno as text.
func isSystemError(err error) bool {
	var errno syscall.Errno
	var pe *os.PathError
	var se *os.SyscallError
	if errors.As(err, &errno) || errors.As(err, &pe) || errors.As(err, &se) {
		return true
	}
	msg := err.Error()
	for _, p := range bboltSystemErrors {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// systemError is err for a IOError: its errno when the chain has one,
// else err with the errno its text names recovered.
func systemError(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		var pe *os.PathError
		if errors.As(err, &pe) && pe.Err == errno {
			return errno
		}
		return err
	}
	msg := err.Error()
	for _, e := range storeErrnos {
		if strings.HasSuffix(msg, e.Error()) {
			return &errnoText{msg: msg, errno: e}
		}
	}
	return err
}

// storeErrnos are the errnos a store operation meets, which systemError
// recovers from an error's text.
var storeErrnos = []syscall.Errno{
	syscall.EROFS, syscall.ENOSPC, syscall.EDQUOT, syscall.EMFILE, syscall.ENFILE, syscall.EACCES,
	syscall.EPERM, syscall.EIO, syscall.ENOMEM, syscall.ENOENT, syscall.ELOOP, syscall.ENOTDIR,
	syscall.EISDIR, syscall.ENAMETOOLONG, syscall.EEXIST, syscall.EFBIG, syscall.ENOLCK, syscall.EINVAL,
	syscall.EAGAIN, syscall.EBADF, syscall.ENODEV, syscall.ENXIO, syscall.ETXTBSY, syscall.ESTALE,
	syscall.EOVERFLOW, syscall.EOPNOTSUPP,
}

// errnoText is a system error whose errno was only in its text.
type errnoText struct {
	msg   string
	errno syscall.Errno
}

func (e *errnoText) Error() string { return e.msg }
func (e *errnoText) Unwrap() error { return e.errno }

// classifyTxError sorts an error of beginning or committing a transaction:
// errnos are the environment; bbolt's verdicts on pages are damage.
func classifyTxError(path string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrUnreadable), errors.Is(err, ErrPageDamaged), errors.Is(err, ErrIO), errors.Is(err, ErrSchema),
		errors.Is(err, ErrUntrusted):
		return err
	}
	if isSystemError(err) {
		return &IOError{Op: "write", Path: path, Err: systemError(err)}
	}
	return err
}

// unwrapPath drops an os.PathError's own path (IOError names it) but
// keeps its errno.
func unwrapPath(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

// structureDamage turns bbolt's verdicts on the file's structure that a
// transaction meets (a plain value where a bucket is expected or the
// reverse: ErrIncompatibleValue; an invalid or corrupt page) into
// ErrPageDamaged, so that every caller sorts them as damage (DEL exits 0);
// any other error is returned as it is.
func structureDamage(path string, err error) error {
	switch {
	case err == nil || IsDamage(err):
		return err
	case errors.Is(err, berrors.ErrIncompatibleValue), errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum):
		return fmt.Errorf("%w: %s: %v", ErrPageDamaged, path, err)
	}
	return err
}
