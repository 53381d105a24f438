package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/hostlease/hostlease/internal/trustfs"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// Defaults of install-cni: the paths of the DaemonSet's init container (the
// plugin at the image's root, the host's CNI bin dir mounted at /host).
const (
	installFromDefault = "/hostlease"
	installToDefault   = "/host/opt/cni/bin"
	installNameDefault = "hostlease"
)

// installVerifyTimeout bounds each run of the plugin's VERSION: a binary that
// does not answer is a failed install, not a hung init container.
const installVerifyTimeout = 30 * time.Second

// installCNICmd copies the plugin into the CNI bin dir without a shell (the
// image has none). Contract:
//   - the target dir is opened once, without following a link, and must be
//     owned by this process's user and not writable by group or others;
//     every later step works relative to that open directory, so a link or a
//     rename swapped in after the check is never written through;
//   - the plugin is copied into a temp file with a random name
//     (.<name>.tmp.<hex>), created exclusively (O_EXCL|O_NOFOLLOW) in the
//     target dir, fsynced, made 0755, run once (CNI VERSION) and only then
//     renamed over <dir>/<name>; the dir is fsynced after the rename. A
//     runtime that execs <dir>/<name> at any instant finds the complete old
//     or the complete new binary, never a partial one; an existing
//     <dir>/<name> is never written to;
//   - after the rename, the installed file (opened without following a link)
//     must have the copied content, and running it with CNI_COMMAND=VERSION
//     must list the CNI spec version this build speaks; otherwise the
//     command says what failed and exits 1;
//   - on any failure before the rename the temp file is removed and the
//     installed binary is left as it was.
func installCNICmd(stdout, stderr io.Writer) *cobra.Command {
	c := &cobra.Command{
		Use:   "install-cni",
		Short: "install the plugin binary into the CNI bin dir atomically and check that it runs",
		Long: "Install the plugin binary into the CNI bin dir without a shell (the DaemonSet's init container): copied to a\n" +
			"temp file in the trusted target dir, run once (CNI VERSION), renamed over the old one, read back and run again.",
		Example: `  hostlease-gc install-cni
  hostlease-gc install-cni --from ./bin/hostlease --to /opt/cni/bin`,
		Args: noArgs,
	}
	from := c.Flags().String("from", installFromDefault, "the plugin binary to install")
	to := c.Flags().String("to", installToDefault, "the CNI bin dir to install it into")
	name := c.Flags().String("name", installNameDefault, "the plugin's file name in --to (the conflists' \"type\")")
	c.RunE = func(*cobra.Command, []string) error {
		if *from == "" || *to == "" {
			return fmt.Errorf("%w: --from and --to must not be empty", errUsage)
		}
		if *name == "" || *name == "." || *name == ".." || strings.ContainsAny(*name, "/\x00") || strings.HasPrefix(*name, ".") {
			return fmt.Errorf("%w: --name %q must be a plain file name (no '/', not starting with '.')", errUsage, *name)
		}
		res, err := installCNI(*from, *to, *name, stderr)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "install-cni: installed %s as %s (sha256 %s, CNI versions %s)\n",
			escape(*from), escape(filepath.Join(*to, *name)), res.sum, strings.Join(res.versions, ","))
		return err
	}
	return c
}

// installResult is what a successful install verified.
type installResult struct {
	sum      string   // sha256 of the installed file
	versions []string // CNI spec versions the installed plugin reports
}

// installCNI is install-cni's work (cmdInstallCNI's contract). Once the
// target dir is checked, nothing is done by its path: the copy is a
// trustfs.Temp of the open directory, committed by renameat relative to its
// descriptor, and both runs of the plugin (the temp file before the rename,
// the installed file after) exec it through that descriptor (inDir), so a
// directory swapped for a link after the check is never entered and nothing
// planted through it is ever run.
func installCNI(from, to, name string, stderr io.Writer) (installResult, error) {
	d, err := trustfs.OpenDir(to)
	if err != nil {
		return installResult{}, fmt.Errorf("--to: %w", err)
	}
	defer d.Close()

	tmp, sum, err := copyToTemp(from, d, name)
	if err != nil {
		return installResult{}, err
	}
	defer tmp.Abort() // nothing once it is the installed file
	if installCheckedHook != nil {
		installCheckedHook()
	}
	// The new binary must run on this node before it replaces the old one.
	if _, err := verifyPlugin(inDir(d, tmp.Name()), stderr); err != nil {
		return installResult{}, fmt.Errorf("%s (copied to %s) does not work here, the installed %s is unchanged: %w",
			from, tmp.Path(), filepath.Join(to, name), err)
	}
	installed := filepath.Join(to, name)
	if err := tmp.Rename(name); err != nil {
		return installResult{}, fmt.Errorf("installing %s: %w", installed, err)
	}

	got, err := hashAt(d.Fd(), name)
	if err != nil {
		return installResult{}, fmt.Errorf("installed %s, but reading it back failed: %w", installed, err)
	}
	if got != sum {
		return installResult{}, fmt.Errorf("installed %s, but it now reads sha256 %s, not the %s copied from %s", installed, got, sum, from)
	}
	versions, err := verifyPlugin(inDir(d, name), stderr)
	if err != nil {
		return installResult{}, fmt.Errorf("installed %s, but running it failed: %w", installed, err)
	}
	return installResult{sum: sum, versions: versions}, nil
}

// installCheckedHook, when set (by tests only), is called once the target
// dir was checked and the new binary copied into it, before it is run and
// renamed: a test swaps the directory there.
var installCheckedHook func()

// inDir is the path of name in the checked directory d through d's
// descriptor in this process, /proc/<pid>/fd/<fd>/<name>: it resolves in
// the directory d holds open, whatever is at d's path by now. The plugin run
// by this path is a child this process waits for, d open all along; an
// interpreter (a "#!" script) opening the path again resolves it the same way
// (this process's /proc/self would be the child's, whose copy of d is
// closed on exec).
func inDir(d *trustfs.Dir, name string) string {
	return "/proc/" + strconv.Itoa(os.Getpid()) + "/fd/" + strconv.Itoa(d.Fd()) + "/" + name
}

// copyToTemp copies from into a new trustfs.Temp of the checked directory d
// (".<name>.tmp.<16 hex digits>", created exclusively), makes it 0755,
// fsyncs and closes it, and returns it with the sha256 of what it copied.
func copyToTemp(from string, d *trustfs.Dir, name string) (*trustfs.Temp, string, error) {
	src, err := openNoFollow(from)
	if err != nil {
		return nil, "", fmt.Errorf("--from %s: %w", from, err)
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return nil, "", fmt.Errorf("--from %s: %w", from, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, "", fmt.Errorf("--from %s is not a regular file (%v)", from, fi.Mode().Type())
	}
	tmp, err := d.CreateTemp("."+name+".tmp.", 0o600)
	if err != nil {
		return nil, "", err
	}
	fail := func(err error) (*trustfs.Temp, string, error) {
		tmp.Abort()
		return nil, "", err
	}
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp.File(), h), src); err != nil {
		return fail(fmt.Errorf("copy %s to %s: %w", from, tmp.Path(), err))
	}
	if err := tmp.File().Chmod(0o755); err != nil {
		return fail(fmt.Errorf("chmod %s: %w", tmp.Path(), err))
	}
	// Closed before it is run: a file open for writing cannot be executed
	// (ETXTBSY).
	if err := tmp.Close(); err != nil {
		return fail(fmt.Errorf("close %s: %w", tmp.Path(), err))
	}
	return tmp, hex.EncodeToString(h.Sum(nil)), nil
}

// openNoFollow opens a file for reading without following a final link.
func openNoFollow(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, errors.New("is a symbolic link: refusing to follow it")
		}
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// hashAt is the sha256 of the regular file name in the directory dirfd,
// opened without following a link.
func hashAt(dirfd int, name string) (string, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// verifyPlugin runs a plugin binary as a runtime asks its version
// (CNI_COMMAND=VERSION) and returns the spec versions it reports; it fails
// unless they include the one this build speaks (version.Current()).
func verifyPlugin(path string, stderr io.Writer) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), installVerifyTimeout)
	defer cancel()
	exec := &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: stderr}, PluginDecoder: version.PluginDecoder{}}
	info, err := invoke.GetVersionInfo(ctx, path, exec)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("CNI VERSION: no answer within %v", installVerifyTimeout)
		}
		return nil, fmt.Errorf("CNI VERSION: %w", err)
	}
	vs := info.SupportedVersions()
	if !slices.Contains(vs, version.Current()) {
		return nil, fmt.Errorf("CNI VERSION lists %q, which lacks spec version %s: not a hostlease plugin of this build", vs, version.Current())
	}
	return vs, nil
}
