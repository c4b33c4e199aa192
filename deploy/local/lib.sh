# Common helpers for the deploy/local scripts. Sourced, not run.
# Every server keeps its state, pid file and log under $TXKIT_HOME (default: <repo>/.txkit).
set -euo pipefail

DEPLOY_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$DEPLOY_DIR/../.." && pwd)
TXKIT_HOME=${TXKIT_HOME:-$REPO_DIR/.txkit}
# Made absolute without creating it: only the commands that start a server create it (ensure_home),
# so status, env and down leave no trace (env at most writes the digest user of a ZooKeeper
# ensemble already there, started before it had one: see `zk auth`).
if [ -d "$TXKIT_HOME" ]; then
  TXKIT_HOME=$(cd "$TXKIT_HOME" && pwd)
else
  case $TXKIT_HOME in /*) ;; *) TXKIT_HOME=$PWD/$TXKIT_HOME ;; esac
  TXKIT_HOME=$(realpath -m -s "$TXKIT_HOME")
fi
export TXKIT_HOME

# Addresses. The Makefile and the tests read the same values.
PG_PORT=${TXKIT_PG_PORT:-55432}
PG_SHARD_PORTS="55452 55453" # the coordinator log's shards 2 and 3 (deploy/local/pg-shards); shard 1 is PG_PORT's
ZK_NODES=${TXKIT_ZK_NODES:-3}
ZK_BASE_PORT=22180 # client port of node N is ZK_BASE_PORT+N
NAMESRV_PORT=19876
BROKER_PORT=20911
ACL_BROKER_PORT=21911 # a second broker with aclEnable=true (deploy/local/rocketmq)
ROCKETMQ_VERSION=4.9.7
# Redis (deploy/local/redis): six independent servers.
REDIS_PORT=26379         # single: the single-node lock
REDLOCK_BASE_PORT=26379  # redlockN (N=1..3) on REDLOCK_BASE_PORT+N: 26380-26382, for Redlock
REDIS_PRIMARY_PORT=26383 # primary, and
REDIS_REPLICA_PORT=26384 # replica (replicaof 127.0.0.1 26383): the failover test
# Redis under Sentinel (deploy/local/redis-sentinel): two data servers and three Sentinels.
SENTINEL_A_PORT=26390    # sentinel-a (the primary at a fresh start); sentinel-b on 26391
SENTINEL_BASE_PORT=26400 # sentinel1-3 on 26400-26402
# RocketMQ clusters (deploy/local/rocketmq-cluster), each with a name server of its own.
DLEDGER_NAMESRV_PORT=19886   # a 3-node DLedger (Raft) broker group,
DLEDGER_BASE_PORT=30911      # node N (0-2) listening on DLEDGER_BASE_PORT+10*N (also -2 and +1),
DLEDGER_PEER_BASE_PORT=40911 # its DLedger peer port on DLEDGER_PEER_BASE_PORT+N
TWOMASTER_NAMESRV_PORT=19896 # two masters, master-a and master-b,
TWOMASTER_BASE_PORT=31911    # master-a on 31911, master-b on 31921 (also -2 and +1)

log() { printf '%s %s\n' "[$(date +%H:%M:%S)]" "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# running PID: PID is a running process. One that has exited but is not reaped yet (a zombie: the
# servers' parent is init, which may take a second or two) is not: its ports are free, and a start
# must not take it for a server already up.
running() {
  local stat
  kill -0 "$1" 2>/dev/null || return 1
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) } # the state follows the command name, which may hold spaces and parentheses
  [ "${stat:0:1}" != Z ]
}

# pid_alive FILE: true when FILE names a running process.
pid_alive() {
  local f=$1 pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f" 2>/dev/null) || return 1
  [ -n "$pid" ] && running "$pid"
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
    running "$pid" || { rm -f "$f"; return 0; }
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

# ensure_home: create $TXKIT_HOME with its pids/ and logs/ (the commands that start a server call it).
ensure_home() { mkdir -p "$TXKIT_HOME/pids" "$TXKIT_HOME/logs"; }

# --- Starting servers: they inherit nothing of their caller ---------------------------------------
# A daemon keeps every descriptor its caller had open for its whole life: a test runner's pipe (the
# runner then never sees end of file), a lock file. So every server is started with descriptors 0-2
# only: stdin from /dev/null, stdout and stderr to its log.

# close_fds: close every file descriptor above 2 of the current shell. Call it in a subshell only.
close_fds() {
  local f fd
  for f in /proc/self/fd/*; do
    fd=${f##*/}
    # The directory listing's own descriptor is already closed once the glob is expanded; closing a
    # descriptor that is not open is a no-op.
    if [[ $fd =~ ^[0-9]+$ ]] && [ "$fd" -gt 2 ]; then exec {fd}>&-; fi
  done
}

# start_daemon PIDFILE LOGFILE CMD...: start CMD in the background in a session of its own (setsid:
# it must not die with the shell or the terminal that started it), with stdin from /dev/null,
# stdout and stderr appended to LOGFILE and no other descriptor of the caller open; write its pid to
# PIDFILE. Returns at once; the caller waits for readiness (wait_until).
start_daemon() {
  local pidf=$1 logf=$2
  shift 2
  # Not a process group leader (no job control in a script), so setsid execs CMD in this very
  # process without forking: $! is CMD's pid.
  (
    close_fds
    exec setsid "$@" </dev/null >>"$logf" 2>&1
  ) &
  echo $! >"$pidf"
}

# without_fds CMD...: run CMD (a function too) to completion with no descriptor above 2 and stdin
# from /dev/null: for commands that fork a daemon of their own, like pg_ctl start.
without_fds() { (close_fds; "$@" </dev/null); }

# --- Ports: fail at once when another process holds one ----------------------------------------

# port_holders PORT: the pids of the processes listening on TCP PORT (any address), one a line; "?"
# for a listener whose process this user cannot see. Fails when nothing listens on PORT. Asks ss, or
# reads /proc/net/tcp* and /proc/*/fd where ss is missing or too old.
port_holders() {
  local port=$1 out pids
  if out=$(ss -Hltnp "sport = :$port" 2>/dev/null); then
    [ -n "$out" ] || return 1
    pids=$(grep -o 'pid=[0-9]*' <<<"$out" | cut -d= -f2 | sort -un) || true # none shown: not ours to see
  else
    local hex inodes inode
    hex=$(printf '%04X' "$port")
    inodes=$(awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { print $10 }' \
      /proc/net/tcp /proc/net/tcp6 2>/dev/null)
    [ -n "$inodes" ] || return 1
    pids=$(for inode in $inodes; do
      find /proc/[0-9]*/fd -lname "socket:\[$inode\]" 2>/dev/null | cut -d/ -f3
    done | sort -un) || true # find fails on processes it may not read or that ended meanwhile
  fi
  printf '%s\n' "${pids:-?}"
}

# home_of_pid PID: the TXKIT_HOME a server of these scripts was started from, read from its command
# line (postgres -D HOME/pg/data, HOME/pg-shardN/data or HOME/pg-ha/pgN/data, Patroni's HOME/pg-ha/pgN/patroni.yml,
# PgBouncer's HOME/pg-ha/bouncer/pgbouncer.ini, HOME/zk/N/zoo.cfg, -Drocketmq.home.dir=HOME/rocketmq, and
# redis-server's process title ending in HOME/redis/NAME/redis.conf). Fails when the command line
# shows none.
home_of_pid() {
  local a
  [ -r "/proc/$1/cmdline" ] || return 1
  while IFS= read -r -d '' a; do
    case $a in
      */pg/data) echo "${a%/pg/data}"; return 0 ;;
      */pg-shard[0-9]*/data) echo "${a%/pg-shard*/data}"; return 0 ;;
      */pg-ha/pg[0-9]*/data | */pg-ha/pg[0-9]*/patroni.yml | */pg-ha/bouncer/pgbouncer.ini) echo "${a%/pg-ha/*}"; return 0 ;;
      */zk/[0-9]*/zoo.cfg) echo "${a%/zk/*}"; return 0 ;;
      -Drocketmq.home.dir=*/rocketmq) a=${a#-Drocketmq.home.dir=}; echo "${a%/rocketmq}"; return 0 ;;
      *' '/*/redis/*/redis.conf) a=${a##* }; echo "${a%/redis/*/redis.conf}"; return 0 ;;
      *' '/*/redis/*/sentinel.conf*) a=${a%/redis/*/sentinel.conf*}; echo "/${a#* /}"; return 0 ;;
      -Drocketmq.home.dir=*/rocketmq-cluster/*) a=${a#-Drocketmq.home.dir=}; echo "${a%/rocketmq-cluster/*}"; return 0 ;;
    esac
  done <"/proc/$1/cmdline"
  return 1
}

# describe_pid PID PORT: "pid N (user U): COMMAND LINE", shortened; for "?", how to find out.
describe_pid() {
  local pid=$1 port=$2 cmd user
  if [ "$pid" = "?" ]; then
    echo "a process this user cannot see (sudo ss -ltnp 'sport = :$port' names it)"
    return 0
  fi
  cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || cmd=""
  user=$(stat -c %U "/proc/$pid" 2>/dev/null) || user="?"
  [ "${#cmd}" -le 200 ] || cmd="${cmd:0:200}..."
  echo "pid $pid (user $user): ${cmd% }"
}

# pid_of FILE: the pid in FILE when that process is alive; nothing otherwise.
pid_of() { if pid_alive "$1"; then cat "$1"; fi; }

# owner PIDFILE PORT: whose process listens on PORT, for status: "this checkout's (pid N)", or
# "NOT this checkout's: pid N (user U), started from TXKIT_HOME=H" (its command line when it shows no
# TXKIT_HOME). Fails in the second case and when nothing listens.
owner() {
  local pidf=$1 port=$2 mine pids p home
  pids=$(port_holders "$port") || { echo "nothing listens on $port"; return 1; }
  mine=$(pid_of "$pidf")
  for p in $pids; do
    if [ -n "$mine" ] && [ "$p" = "$mine" ]; then echo "this checkout's (pid $p)"; return 0; fi
  done
  p=$(head -n 1 <<<"$pids")
  if home=$(home_of_pid "$p"); then
    echo "NOT this checkout's: pid $p (user $(stat -c %U "/proc/$p" 2>/dev/null || echo ?)), started from TXKIT_HOME=$home"
  else
    echo "NOT this checkout's: $(describe_pid "$p" "$port")"
  fi
  return 1
}

# down_note PIDFILE: for a server that does not answer, " (pid N of this checkout is alive)" when its
# process still runs (starting, hung), nothing otherwise.
down_note() {
  local mine
  mine=$(pid_of "$1")
  if [ -n "$mine" ]; then echo " (pid $mine of this checkout is alive but does not answer)"; fi
}

# claim_ports NAME PIDFILE PORT...: before starting server NAME. Succeeds when every PORT is free or
# held by the process in PIDFILE (this checkout's server, already running). Otherwise dies at once
# naming the port, the process that holds it and what to do, instead of starting a server that
# cannot bind and waiting for it.
claim_ports() {
  local name=$1 pidf=$2 port mine pids p home why hint
  shift 2
  mine=$(pid_of "$pidf")
  for port in "$@"; do
    pids=$(port_holders "$port") || continue
    for p in $pids; do
      if [ -n "$mine" ] && [ "$p" = "$mine" ]; then continue 2; fi
    done
    p=$(head -n 1 <<<"$pids")
    if [ -n "$mine" ]; then
      why="This checkout's $name is another process, pid $mine ($pidf)."
    else
      why="It is not this checkout's $name (TXKIT_HOME=$TXKIT_HOME has no live pid file for it)."
    fi
    hint="Stop that process, or point TXKIT_HOME at the checkout that runs it"
    if home=$(home_of_pid "$p"); then
      hint="$hint: it was started from TXKIT_HOME=$home (see TXKIT_HOME=$home deploy/local/status)"
    fi
    die "$name: port $port is already in use by $(describe_pid "$p" "$port")
  $why
  $hint."
  done
}

# --- Probes ---------------------------------------------------------------------------------------

# be32 N: N as four big-endian bytes, in printf escapes.
be32() { printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) $(($1 >> 8 & 255)) $(($1 & 255)); }

# rmq_request PORT CODE [EXTFIELDS]: one RocketMQ remoting request (JSON header, no body) to
# 127.0.0.1:PORT, a real probe that needs no Java. Prints the response code on the first line and the
# response body (JSON) after it. Fails when nothing answers within 3 s.
rmq_request() (
  port=$1 code=$2 ext=${3:-}
  header="{\"code\":$code,${ext:+\"extFields\":$ext,}\"flag\":0,\"language\":\"JAVA\",\"opaque\":1,\"serializeTypeCurrentRPC\":\"JSON\",\"version\":395}"
  exec 2>/dev/null 3<>"/dev/tcp/127.0.0.1/$port" || exit 1 # this subshell's errors mean "no answer"
  # shellcheck disable=SC2059 # the format holds the frame's binary length fields
  printf "$(be32 $((4 + ${#header})))$(be32 ${#header})%s" "$header" >&3
  len=$(timeout 3 head -c 4 <&3 | od -An -tu4 --endian=big | tr -d ' ')
  [ -n "$len" ] || exit 1
  hl=$(timeout 3 head -c 4 <&3 | od -An -tu4 --endian=big | tr -d ' ')
  [ -n "$hl" ] || exit 1
  hl=$((hl & 0xFFFFFF)) # the high byte is the serialization type
  rheader=$(timeout 3 head -c "$hl" <&3) || exit 1
  rcode=$(grep -o '"code":-\{0,1\}[0-9]*' <<<"$rheader" | head -n 1 | cut -d: -f2)
  [ -n "$rcode" ] || exit 1
  echo "$rcode"
  printf '%s' "$rheader" | grep -o '"remark":"[^"]*"' || true
  if [ $((len - 4 - hl)) -gt 0 ]; then timeout 3 head -c $((len - 4 - hl)) <&3 | tr -d '\000'; echo; fi
)
