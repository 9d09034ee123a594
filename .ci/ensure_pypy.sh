#!/usr/bin/env bash
# Installs Debian's PyPy (pypy3, and pypy3-venv for `pypy3 -m venv`) for
# tox's pypy3 environment, only when the machine lacks it; a machine that
# has it is left alone. It runs before tox (README's test command, .ci/run):
# tox looks for the interpreter when it creates the environment, before any
# commands_pre could install it, and a missing one fails the run.
set -euo pipefail
if command -v pypy3 >/dev/null 2>&1 && pypy3 -c 'import venv' >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_pypy: pypy3 is missing and there is no apt-get to install it" >&2
    exit 1
fi
sudo=()
if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "ensure_pypy: pypy3 is missing and installing it needs root:" \
            "run 'apt-get install -y pypy3 pypy3-venv' as root" >&2
        exit 1
    fi
    sudo=(sudo -n)
fi
echo "ensure_pypy: installing Debian's pypy3 and pypy3-venv"
export DEBIAN_FRONTEND=noninteractive
# The package lists are refreshed only when they cannot serve the install.
if ! ${sudo[@]+"${sudo[@]}"} apt-get install -y -qq pypy3 pypy3-venv >/dev/null 2>&1; then
    ${sudo[@]+"${sudo[@]}"} apt-get update -qq
    ${sudo[@]+"${sudo[@]}"} apt-get install -y -qq pypy3 pypy3-venv >/dev/null
fi
pypy3 --version
