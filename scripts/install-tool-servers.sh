#!/usr/bin/env bash
# The third-party MCP tool servers the tests of mindfleet-tools run against, at pinned versions:
# server-everything and server-filesystem from npm (Node 20 or later), mcp-server-git from the
# Python package index (Python 3.10 or later, in a venv of its own).
#
# They go where the local models go (`mindfleet models pull`), beside them:
# `$MINDFLEET_TOOL_SERVERS`, else `$XDG_CACHE_HOME/mindfleet/tool-servers`, else
# `~/.cache/mindfleet/tool-servers`, else `./.mindfleet-tool-servers`. The tests look in the same
# place (mindfleet_tools::installed), so the two must change together.
#
# Idempotent: a package already present at its pinned version is not fetched again. Prints where
# each server ended up.
set -euo pipefail

EVERYTHING_VERSION=2026.8.31
FILESYSTEM_VERSION=2026.8.31
GIT_VERSION=2026.10.19
# mcp-server-git asks for `mcp>=2.3,<3`: pinned too, so a new SDK release cannot change what the
# tests meet.
PY_MCP_VERSION=2.3.0

if [ -n "${MINDFLEET_TOOL_SERVERS:-}" ]; then
    dir=$MINDFLEET_TOOL_SERVERS
elif [ -n "${XDG_CACHE_HOME:-}" ]; then
    dir=$XDG_CACHE_HOME/mindfleet/tool-servers
elif [ -n "${HOME:-}" ]; then
    dir=$HOME/.cache/mindfleet/tool-servers
else
    dir=.mindfleet-tool-servers
fi
mkdir -p "$dir"

command -v node >/dev/null || { echo "install-tool-servers: node (20 or later) not found" >&2; exit 1; }
command -v npm >/dev/null || { echo "install-tool-servers: npm not found" >&2; exit 1; }
command -v python3 >/dev/null || { echo "install-tool-servers: python3 (3.10 or later) not found" >&2; exit 1; }

# The version of an npm package installed under $dir/npm, or nothing.
npm_version() {
    local manifest="$dir/npm/node_modules/$1/package.json"
    [ -f "$manifest" ] && node -p "require(process.argv[1]).version" "$manifest" 2>/dev/null || true
}

if [ "$(npm_version @modelcontextprotocol/server-everything)" != "$EVERYTHING_VERSION" ] \
    || [ "$(npm_version @modelcontextprotocol/server-filesystem)" != "$FILESYSTEM_VERSION" ]; then
    mkdir -p "$dir/npm"
    # A package.json of our own, so npm installs here and not in an enclosing project.
    [ -f "$dir/npm/package.json" ] || echo '{ "private": true }' >"$dir/npm/package.json"
    npm install --prefix "$dir/npm" --save-exact --no-audit --no-fund --loglevel=error \
        "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" \
        "@modelcontextprotocol/server-filesystem@$FILESYSTEM_VERSION"
fi

venv=$dir/venv
py_version() {
    [ -x "$venv/bin/python" ] \
        && "$venv/bin/python" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1" 2>/dev/null \
        || true
}
if [ "$(py_version mcp-server-git)" != "$GIT_VERSION" ] || [ "$(py_version mcp)" != "$PY_MCP_VERSION" ]; then
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "mcp-server-git==$GIT_VERSION" "mcp==$PY_MCP_VERSION"
fi

bin=$dir/npm/node_modules/.bin
for server in "$bin/mcp-server-everything" "$bin/mcp-server-filesystem" "$venv/bin/mcp-server-git"; do
    [ -x "$server" ] || { echo "install-tool-servers: $server missing after the install" >&2; exit 1; }
done
# One directory with a link to each, which the fleet looks in for a `command` not on PATH.
mkdir -p "$dir/bin"
ln -sf "$bin/mcp-server-everything" "$dir/bin/mcp-server-everything"
ln -sf "$bin/mcp-server-filesystem" "$dir/bin/mcp-server-filesystem"
ln -sf "$venv/bin/mcp-server-git" "$dir/bin/mcp-server-git"
echo "server-everything $EVERYTHING_VERSION  $bin/mcp-server-everything"
echo "server-filesystem $FILESYSTEM_VERSION  $bin/mcp-server-filesystem"
echo "mcp-server-git    $GIT_VERSION  $venv/bin/mcp-server-git"
