#!/usr/bin/env bash
# Installs a Java runtime for PySpark 4 (Java 17 or newer) only when the
# machine lacks one; a machine that has it is left alone.
set -euo pipefail
java_major() {
    java -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print (v[1] == "1" ? v[2] : v[1]); exit}'
}
if command -v java >/dev/null 2>&1 && [ "$(java_major)" -ge 17 ] 2>/dev/null; then
    exit 0
fi
echo "ensure_java: installing default-jre-headless (Java 17+ is needed by PySpark 4)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq default-jre-headless >/dev/null
java -version
