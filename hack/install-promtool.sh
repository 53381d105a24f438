#!/usr/bin/env bash
# Installs promtool (used by deploy/deploy_test.go to run `promtool check rules`
# and `promtool test rules` on deploy/prometheus/) if it is not on PATH yet.
#
# On Debian, promtool ships in the `prometheus` package (/usr/bin/promtool).
# That package also contains the Prometheus server and its maintainer scripts
# try to start it; we only want the CLI, so:
#   - recommends (prometheus-node-exporter, another daemon) are not installed;
#   - while apt runs, a policy-rc.d that forbids starting services is put in
#     place when none exists (it is removed again afterwards);
#   - afterwards the prometheus service is stopped and disabled if an init
#     system started it anyway, so nothing listens on :9090.
#
# Idempotent: a second run finds promtool and does nothing. Needs root (or
# sudo) only when it actually has to install.
set -euo pipefail

log() { printf 'install-promtool: %s\n' "$*" >&2; }

if command -v promtool >/dev/null 2>&1; then
	log "promtool already installed: $(command -v promtool) ($(promtool --version 2>&1 | head -n1))"
	exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
	log "promtool is missing and this is not a Debian/Ubuntu system (no apt-get)."
	log "Install promtool by hand (it ships with every Prometheus release) and re-run."
	exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		SUDO="sudo"
		log "not root: using sudo for apt-get"
	else
		log "promtool is missing and we are neither root nor have sudo; cannot install it"
		exit 1
	fi
fi

POLICY=/usr/sbin/policy-rc.d
OWN_POLICY=0
cleanup() {
	if [ "$OWN_POLICY" = 1 ]; then
		log "removing temporary $POLICY"
		$SUDO rm -f "$POLICY"
	fi
}
trap cleanup EXIT

if [ ! -e "$POLICY" ]; then
	log "installing temporary $POLICY so the package does not start the Prometheus server"
	printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
	$SUDO chmod 0755 "$POLICY"
	OWN_POLICY=1
fi

export DEBIAN_FRONTEND=noninteractive
install_pkg() {
	log "apt-get install -y --no-install-recommends prometheus"
	$SUDO apt-get install -y --no-install-recommends prometheus
}

if ! apt-cache show prometheus >/dev/null 2>&1 || ! install_pkg; then
	log "package not found or install failed with the current lists: apt-get update, then retry"
	$SUDO apt-get update
	install_pkg
fi

# The package's postinst may have enabled/started the server. We want only the
# CLI: stop and disable the service wherever an init system is active.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
	log "stopping and disabling prometheus.service (systemd)"
	$SUDO systemctl disable --now prometheus.service >/dev/null 2>&1 || true
elif [ -x /etc/init.d/prometheus ]; then
	log "stopping the prometheus init.d service (if running)"
	$SUDO /etc/init.d/prometheus stop >/dev/null 2>&1 || true
	if command -v update-rc.d >/dev/null 2>&1; then
		$SUDO update-rc.d prometheus disable >/dev/null 2>&1 || true
	fi
fi

if command -v ss >/dev/null 2>&1 && ss -ltn 2>/dev/null | awk '{print $4}' | grep -qE ':9090$'; then
	log "WARNING: something still listens on :9090 after install; check 'ss -ltnp'"
else
	log "no listener on :9090"
fi

if ! command -v promtool >/dev/null 2>&1; then
	log "prometheus installed but promtool is not on PATH"
	exit 1
fi
log "installed $(command -v promtool) ($(promtool --version 2>&1 | head -n1))"
