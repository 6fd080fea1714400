#!/bin/sh
# Start one node of relay's replicated Redis (1 primary, replicas, Sentinels), as used
# by deploy/docker-compose.sentinel.yml and deploy/k8s/sentinel/ (which embeds a verbatim
# copy of this file; tests/system/test_deploy_ha.py checks the copy and runs this script against
# real redis-server processes, failover included).
#
#   redis-ha.sh redis [redis-server options]      a Redis node: the primary Sentinel
#                                                 names, else a replica of it
#   redis-ha.sh sentinel [redis-server options]   a Sentinel watching that primary
#
# Every start asks the Sentinels first who the primary is NOW, so a node that comes back
# after a failover rejoins as a replica of the new primary (never as a second primary).
# Only when no Sentinel answers (the very first start) is FIRST_PRIMARY the primary.
#
# Neither runs as root: started as root (the redis image's default), the script hands
# its data folder to RUN_AS and runs again as that user; started as root without
# RUN_AS, it refuses. Each writes only in its own folder: a node runs from a copy of
# REDIS_CONF made there at every start (Sentinel's failover rewrites the file a node
# was started with), a Sentinel from a sentinel.conf written there.
#
# Environment (defaults in brackets):
#   SELF_HOST      the name other nodes and relay reach this node by (required)
#   FIRST_PRIMARY  host of the primary on the very first start (required)
#   FIRST_PRIMARY_PORT [REDIS_PORT]
#   SENTINELS      "host:port host:port ..." of every Sentinel (required)
#   REDIS_PORT [6379]  SENTINEL_PORT [26379]  MASTER_NAME [relay]  QUORUM [2]
#   DOWN_AFTER_MS [5000]  FAILOVER_TIMEOUT_MS [60000]
#   REDIS_CONF [/usr/local/etc/redis/redis.conf]  read, never written
#   DATA_DIR [/data]  a node's data and its copy of REDIS_CONF
#   SENTINEL_DIR [/data/sentinel]  a Sentinel's sentinel.conf
#   RUN_AS         user[:group] to run as when started as root (e.g. redis)
#   REDIS_PASSWORD  when set, nodes require it (and replicas and Sentinels use it)
set -eu

REDIS_PORT="${REDIS_PORT:-6379}"
SENTINEL_PORT="${SENTINEL_PORT:-26379}"
MASTER_NAME="${MASTER_NAME:-relay}"
REDIS_CONF="${REDIS_CONF:-/usr/local/etc/redis/redis.conf}"
DATA_DIR="${DATA_DIR:-/data}"
SENTINEL_DIR="${SENTINEL_DIR:-/data/sentinel}"
password="${REDIS_PASSWORD:-}"
# What is written below may hold the password (sentinel.conf, a node's rewritten copy).
umask 077

mode="${1:-}"
case "$mode" in
  redis) own="$DATA_DIR" ;;
  sentinel) own="$SENTINEL_DIR" ;;
  *)
    echo "usage: redis-ha.sh redis|sentinel" >&2
    exit 2
    ;;
esac

if [ "$(id -u)" = 0 ]; then
  if [ -z "${RUN_AS:-}" ]; then
    echo "redis-ha.sh: refusing to run Redis as root: set RUN_AS (e.g. RUN_AS=redis)" >&2
    exit 2
  fi
  user="${RUN_AS%%:*}"
  group="${RUN_AS#*:}"
  [ "$group" != "$RUN_AS" ] || group=$(id -gn "$user")
  # As the redis image's entrypoint does for /data: files an earlier root run left
  # there become the user's, so a node keeps its data.
  mkdir -p "$own"
  find "$own" ! -user "$user" -exec chown "$user:$group" {} +
  exec setpriv --reuid="$user" --regid="$group" --init-groups sh "$0" "$@"
fi
shift

# "host port" of the primary as a Sentinel names it, or FIRST_PRIMARY's.
primary() {
  for s in $SENTINELS; do
    reply=$(redis-cli -h "${s%:*}" -p "${s##*:}" --raw SENTINEL get-master-addr-by-name \
      "$MASTER_NAME" 2>/dev/null) || continue
    host=$(echo "$reply" | sed -n 1p)
    port=$(echo "$reply" | sed -n 2p)
    case "$port" in
      '' | *[!0-9]*) continue ;;
    esac
    echo "$host $port"
    return
  done
  echo "$FIRST_PRIMARY ${FIRST_PRIMARY_PORT:-$REDIS_PORT}"
}

read -r p_host p_port <<EOF
$(primary)
EOF

case "$mode" in
  redis)
    mkdir -p "$DATA_DIR"
    # A fresh copy each start: the role comes from the Sentinels below, never from a
    # replicaof that a past failover wrote into the copy.
    conf="$DATA_DIR/redis-node.conf"
    cat "$REDIS_CONF" > "$conf"
    # Options, not lines of the copy: redis-server replaces its command line (no password
    # in `ps`). masterauth: a node that becomes a replica authenticates to the primary.
    if [ -n "$password" ]; then
      set -- --requirepass "$password" --masterauth "$password" "$@"
    fi
    if [ "$p_host" = "$SELF_HOST" ] && [ "$p_port" = "$REDIS_PORT" ]; then
      exec redis-server "$conf" --dir "$DATA_DIR" --port "$REDIS_PORT" \
        --replica-announce-ip "$SELF_HOST" "$@"
    fi
    exec redis-server "$conf" --dir "$DATA_DIR" --port "$REDIS_PORT" \
      --replicaof "$p_host" "$p_port" --replica-announce-ip "$SELF_HOST" "$@"
    ;;
  sentinel)
    dir="$SENTINEL_DIR"
    mkdir -p "$dir"
    # Sentinel rewrites its file as it learns; a fresh one each start, from what the
    # other Sentinels say now, never a stale view of a past primary.
    cat > "$dir/sentinel.conf" <<EOF
port $SENTINEL_PORT
dir $dir
sentinel resolve-hostnames yes
sentinel announce-hostnames yes
sentinel announce-ip $SELF_HOST
sentinel announce-port $SENTINEL_PORT
sentinel monitor $MASTER_NAME $p_host $p_port ${QUORUM:-2}
sentinel down-after-milliseconds $MASTER_NAME ${DOWN_AFTER_MS:-5000}
sentinel failover-timeout $MASTER_NAME ${FAILOVER_TIMEOUT_MS:-60000}
sentinel parallel-syncs $MASTER_NAME 1
EOF
    if [ -n "$password" ]; then
      echo "sentinel auth-pass $MASTER_NAME $password" >> "$dir/sentinel.conf"
    fi
    exec redis-server "$dir/sentinel.conf" --sentinel "$@"
    ;;
esac
