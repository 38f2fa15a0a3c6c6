#!/usr/bin/env bash
# Install what the programs in examples/ need, on Debian, as root. Idempotent:
# only what is missing is installed. The test suite (tests/e2e/test_examples.py)
# runs every example; on CI a missing toolchain fails the suite.
#
#   examples/install-toolchains.sh [VENV]      VENV: the Python venv (default .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv}
export DEBIAN_FRONTEND=noninteractive

packages=()
command -v psql >/dev/null || packages+=(postgresql-client)
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)
command -v ruby >/dev/null || packages+=(ruby)
ruby -e 'require "pg"' 2>/dev/null || packages+=(ruby-pg)
# `java Enqueue.java` (single-file source launch) needs the compiler, not only a JRE.
command -v javac >/dev/null || packages+=(default-jdk-headless)
[[ -e /usr/share/java/postgresql.jar ]] || packages+=(libpostgresql-jdbc-java)
if ((${#packages[@]})); then
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${packages[@]}"
fi

# Node.js: the `pg` package, exactly as pinned in package-lock.json.
if [[ ! -d examples/node/node_modules/pg ]]; then
    npm ci --prefix examples/node --no-audit --no-fund --loglevel=error
fi

# Python: psycopg 3 (asyncpg is already a dependency of outbox-mailer).
"$venv/bin/python" -c 'import psycopg' 2>/dev/null || "$venv/bin/pip" install -q 'psycopg[binary]>=3.1'
