# Sourced by the other scripts: finds a Go toolchain of at least
# $KVFS_GO_MIN and puts it first on PATH. It installs nothing; run
# scripts/setup first on a fresh machine.
KVFS_GO_VERSION=${KVFS_GO_VERSION:-1.26.8}
KVFS_GO_MIN=1.26

kvfs_go_ok() { # $1: path to a go binary
	local v
	v=$("$1" env GOVERSION 2>/dev/null) || return 1
	v=${v#go}
	[ "$(printf '%s\n%s\n' "$KVFS_GO_MIN" "$v" | sort -V | head -n1)" = "$KVFS_GO_MIN" ]
}

kvfs_find_go() {
	local cand
	for cand in "$(command -v go 2>/dev/null)" /usr/local/go/bin/go \
		"${KVFS_TOOLCHAIN_DIR:-/usr/local/lib/kvfs}/go/bin/go"; do
		if [ -n "$cand" ] && [ -x "$cand" ] && kvfs_go_ok "$cand"; then
			printf '%s\n' "$cand"
			return 0
		fi
	done
	return 1
}

if KVFS_GO=$(kvfs_find_go); then
	PATH="$(dirname "$KVFS_GO"):$PATH"
	export PATH
fi
