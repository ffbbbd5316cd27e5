#!/usr/bin/env bash
# `make services`: Postgres on 127.0.0.1:5432 (user postgres, trust auth for local
# connections, as the tests and `make run` expect) and Redis on 127.0.0.1:6379, whatever
# state the machine is in: nothing installed, Debian's Postgres installed but stopped
# with its default (peer/scram) authentication, or both already up. Safe to run again.
#
# Needs root (or sudo) only for what it changes: apt-get install, pg_hba.conf, starting
# the cluster. Redis is started as the calling user, in-memory, bound to 127.0.0.1.
set -euo pipefail

# Other ports only for tools/services.sh's own test, which brings up a second cluster.
PG_PORT=${XMC_SERVICES_PG_PORT:-5432}
REDIS_PORT=${XMC_SERVICES_REDIS_PORT:-6379}

log() { printf '== services: %s\n' "$*"; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        echo "services: '$*' needs root; run as root or install sudo" >&2
        exit 1
    fi
}

apt_install() {
    log "apt-get install $*"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

postgres_trusts_us() {
    # -w: never prompt; a server that wants a password fails here instead of hanging.
    psql -w -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -Atc 'select 1' >/dev/null 2>&1
}

# The Debian cluster that listens on $PG_PORT (else the first one), as "VERSION NAME".
pg_cluster() {
    pg_lsclusters -h | awk -v port="$PG_PORT" '$3 == port { print $1, $2; found = 1; exit }
        END { if (!found) exit 1 }' || pg_lsclusters -h | awk 'NR == 1 { print $1, $2 }'
}

trust_local_connections() {
    # Debian's default is peer for the socket and scram-sha-256 on TCP; the tests and
    # `make run` connect as postgres@127.0.0.1 without a password. Only loopback is
    # trusted; the file's other lines are left as they are.
    local hba=$1
    as_root sed -i -E \
        -e 's/^(host\s+all\s+all\s+(127\.0\.0\.1\/32|::1\/128)\s+)\S+/\1trust/' \
        -e 's/^(local\s+all\s+(postgres|all)\s+)\S+/\1trust/' "$hba"
}

# The test suite's four workers each run whole stacks (ESS replicas, Actuators, their
# pools, fixtures' own pools): at their peaks they passed Debian's 100 connections, and a
# service starting then died on "sorry, too many clients already".
PG_MAX_CONNECTIONS=300

allow_enough_connections() {
    local conf=$1
    as_root mkdir -p "$conf/conf.d"
    printf '# written by tools/services.sh (XMC tests)\nmax_connections = %s\n' \
        "$PG_MAX_CONNECTIONS" | as_root tee "$conf/conf.d/xmc-tests.conf" >/dev/null
}

warn_if_too_few_connections() {
    local now
    now=$(psql -w -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -Atc 'show max_connections')
    [ "$now" -ge "$PG_MAX_CONNECTIONS" ] 2>/dev/null ||
        log "Postgres allows $now connections; the tests may need $PG_MAX_CONNECTIONS (set max_connections, then restart it)"
}

ensure_postgres() {
    if postgres_trusts_us; then
        log "Postgres is up on 127.0.0.1:$PG_PORT"
        warn_if_too_few_connections
        return
    fi
    command -v pg_lsclusters >/dev/null && [ -n "$(pg_lsclusters -h 2>/dev/null)" ] ||
        apt_install postgresql postgresql-client
    if [ -z "$(pg_lsclusters -h)" ]; then
        # Installed, but its cluster was dropped (or never made): make one, as the package would.
        local newest
        newest=$(ls /usr/lib/postgresql | sort -V | tail -n1)
        log "creating Postgres cluster $newest/main on port $PG_PORT"
        as_root pg_createcluster "$newest" main --port "$PG_PORT"
    fi
    read -r version name < <(pg_cluster)
    local conf=/etc/postgresql/$version/$name
    local port
    port=$(pg_lsclusters -h | awk -v v="$version" -v n="$name" '$1 == v && $2 == n { print $3 }')
    if [ "$port" != "$PG_PORT" ]; then
        echo "services: Postgres cluster $version/$name listens on $port, not $PG_PORT;" \
            "set port = $PG_PORT in $conf/postgresql.conf or point XMC_TEST_DATABASE_URL at it" >&2
        exit 1
    fi
    trust_local_connections "$conf/pg_hba.conf"
    allow_enough_connections "$conf"
    if pg_lsclusters -h | awk -v v="$version" -v n="$name" '$1 == v && $2 == n' | grep -q online; then
        log "reloading Postgres $version/$name (trust for loopback)"
        as_root pg_ctlcluster --skip-systemctl-redirect "$version" "$name" reload
    else
        log "starting Postgres $version/$name"
        as_root pg_ctlcluster --skip-systemctl-redirect "$version" "$name" start
    fi
    for _ in $(seq 1 60); do
        postgres_trusts_us && { log "Postgres is up on 127.0.0.1:$PG_PORT"; warn_if_too_few_connections; return; }
        sleep 1
    done
    echo "services: Postgres did not accept postgres@127.0.0.1:$PG_PORT without a password" \
        "(see /var/log/postgresql/postgresql-$version-$name.log)" >&2
    exit 1
}

ensure_redis() {
    # The fault tests start private redis-server processes, so the binary must be here
    # even when something already answers on $REDIS_PORT.
    command -v redis-server >/dev/null && command -v redis-cli >/dev/null || apt_install redis-server
    if redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping >/dev/null 2>&1; then
        log "Redis is up on 127.0.0.1:$REDIS_PORT"
        return
    fi
    log "starting Redis"
    redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
        --logfile "${TMPDIR:-/tmp}/xmc-redis-$REDIS_PORT.log"
    for _ in $(seq 1 30); do
        redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping >/dev/null 2>&1 && { log "Redis is up on 127.0.0.1:$REDIS_PORT"; return; }
        sleep 1
    done
    echo "services: Redis did not come up on 127.0.0.1:$REDIS_PORT" >&2
    exit 1
}

ensure_postgres
ensure_redis
