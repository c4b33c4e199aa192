# Common helpers for the deploy/local scripts. Sourced, not run.
# Every server keeps its state, pid file and log under $TXKIT_HOME (default: <repo>/.txkit).
set -euo pipefail

DEPLOY_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$DEPLOY_DIR/../.." && pwd)
TXKIT_HOME=${TXKIT_HOME:-$REPO_DIR/.txkit}
mkdir -p "$TXKIT_HOME"
TXKIT_HOME=$(cd "$TXKIT_HOME" && pwd)
export TXKIT_HOME

# Addresses. The Makefile and the tests read the same values.
PG_PORT=${TXKIT_PG_PORT:-55432}
ZK_NODES=${TXKIT_ZK_NODES:-3}
ZK_BASE_PORT=22180 # client port of node N is ZK_BASE_PORT+N
NAMESRV_PORT=19876
BROKER_PORT=20911
ACL_BROKER_PORT=21911 # a second broker with aclEnable=true (deploy/local/rocketmq)
ROCKETMQ_VERSION=4.9.7

log() { printf '%s %s\n' "[$(date +%H:%M:%S)]" "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# pid_alive FILE: true when FILE names a running process.
pid_alive() {
  local f=$1 pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

# stop_pid NAME FILE: TERM the process in FILE, KILL it after 15 s, remove FILE.
# Only processes that a script of ours started (and wrote a pid file for) are touched.
stop_pid() {
  local name=$1 f=$2 pid i
  if ! pid_alive "$f"; then
    rm -f "$f"
    return 0
  fi
  pid=$(cat "$f")
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 150); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$f"; return 0; }
    sleep 0.1
  done
  log "$name did not stop in 15 s; killing it"
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$f"
}

# wait_until SECONDS NAME LOGFILE PIDFILE CMD...: poll CMD until it succeeds.
# Fails with the log file's name (and its tail) when the time runs out or the process dies.
wait_until() {
  local secs=$1 name=$2 logf=$3 pidf=$4
  shift 4
  local deadline=$((SECONDS + secs))
  while ((SECONDS < deadline)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    if [ -n "$pidf" ] && ! pid_alive "$pidf"; then
      tail -n 30 "$logf" >&2 || true
      die "$name exited while starting; see $logf"
    fi
    sleep 0.2
  done
  tail -n 30 "$logf" >&2 || true
  die "$name did not come up within ${secs}s; see $logf"
}

# tcp_open PORT: something listens on 127.0.0.1:PORT.
tcp_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# apt_install PKG...: install Debian packages that are missing (needs root or sudo).
apt_install() {
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  log "installing $* with apt-get"
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}
