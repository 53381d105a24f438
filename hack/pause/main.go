// Command pause is the sandbox ("infra") process of the hostlease e2e pause
// image. It is built statically and placed as /pause in the image that
// hack/image.sh packs.
//
// Guarantees:
//   - it does nothing but wait: no network traffic, no files written;
//   - SIGINT or SIGTERM makes it exit with status 0, so a sandbox stop is
//     clean and quick;
//   - as PID 1 of a pod it reaps every child that exits (SIGCHLD), so
//     processes re-parented to it never linger as zombies.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		switch sig {
		case syscall.SIGCHLD:
			reap()
		default:
			os.Exit(0)
		}
	}
}

// reap collects every exited child without blocking.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
