#!/usr/bin/env bash
# hack/tree-stamp.sh — print one line that changes whenever the working
# tree's content does: the commit, the uncommitted changes to tracked files
# and every untracked file that is not ignored. hack/setup.sh stamps the
# release it builds for make test with it; hack/test.sh uses that release
# only if the stamp still matches (otherwise each suite builds its own).
set -euo pipefail
cd "$(dirname "$0")/.."
{
	git rev-parse HEAD
	git diff HEAD --binary
	git ls-files --others --exclude-standard -z | xargs -0 -r sha256sum --
} | sha256sum | cut -d' ' -f1
