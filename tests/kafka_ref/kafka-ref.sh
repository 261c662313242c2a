#!/usr/bin/env bash
# Apache Kafka 4.3.1 as a *test reference* for doze-kafka: run the real broker
# next to ours to compare behaviour. Never a dependency of the broker.
# Needs `make kafka-ref` first (writes target/classpath.txt).
#
#   kafka-ref.sh start <port> <dir> [key=value ...]
#       Single-node KRaft broker+controller on 127.0.0.1:<port>, data and logs
#       under <dir>. Extra key=value pairs are appended to server.properties
#       (e.g. offsets.topic.num.partitions=1). Prints the bootstrap address
#       once the broker is ready. A <dir> already formatted by an earlier
#       start is restarted with its own server.properties (for restart tests).
#   kafka-ref.sh stop <dir>
#       SIGTERM (controlled shutdown), then SIGKILL after KAFKA_REF_STOP_TIMEOUT s.
#   kafka-ref.sh tool <MainClass> [args...]
#       Runs a Kafka class on the same classpath, e.g.
#       org.apache.kafka.tools.TransactionsCommand --bootstrap-server 127.0.0.1:9192 list
#
# Environment: JAVA_HOME (default: the `java` on PATH, 17+),
# KAFKA_REF_HEAP_OPTS, KAFKA_REF_READY_TIMEOUT (60), KAFKA_REF_STOP_TIMEOUT (30),
# KAFKA_REF_LOG_LEVEL (INFO; the level of <dir>/kafka.log).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CP_FILE=$HERE/target/classpath.txt
JAVA=${JAVA_HOME:+$JAVA_HOME/bin/}java
READY_TIMEOUT=${KAFKA_REF_READY_TIMEOUT:-60}
STOP_TIMEOUT=${KAFKA_REF_STOP_TIMEOUT:-30}
# Kafka's own default is -Xmx1G -Xms1G; a smaller floor suits a 2-core test box.
HEAP_OPTS=${KAFKA_REF_HEAP_OPTS:--Xms256m -Xmx1g}

die() { echo "kafka-ref: $*" >&2; exit 1; }

classpath() {
  [ -s "$CP_FILE" ] || die "no $CP_FILE: run 'make kafka-ref' first"
  cat "$CP_FILE"
}

# The pid in <dir>/kafka.pid, only if that process is still our kafka.Kafka
# (a stale pid file must never make us signal an unrelated process).
broker_pid() {
  local pid
  pid=$(cat "$1/kafka.pid" 2>/dev/null) || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'kafka\.Kafka' || return 1
  echo "$pid"
}

# A free loopback port for the CONTROLLER listener (the kernel picks it).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# A Kafka Uuid: 16 random bytes, url-safe base64 without padding, not starting
# with '-' (Kafka's own Uuid.randomUuid avoids that too: it reads as an option).
cluster_id() {
  python3 -c '
import base64, os
while True:
    u = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
    if not u.startswith("-"):
        print(u); break'
}

write_server_properties() {
  local port=$1 dir=$2 cport; shift 2
  cport=$(free_port)
  # Static quorum (controller.quorum.voters): one voter, no dynamic-quorum
  # bootstrap to go wrong. The replication factors of the internal topics
  # must be 1 on a single node, and a group's first rebalance should not
  # wait the default 3 s.
  cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/logs
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
  local kv
  for kv in "$@"; do
    [[ $kv == *=* ]] || die "not key=value: $kv"
    echo "$kv" >>"$dir/server.properties"
  done
}

# On a failed start: the JVM's own output and the first ERROR lines of this
# run (the cause, e.g. "Unable to start acceptor", comes long before the
# shutdown noise at the end of the log).
startup_errors() {
  local dir=$1 log_from=$2
  tail -n 20 "$dir/kafka.out" >&2 2>/dev/null || true
  tail -c +"$((log_from + 1))" "$dir/kafka.log" 2>/dev/null | grep -m 5 -A 2 -E ' (ERROR|FATAL) ' >&2 || true
}

cmd_start() {
  [ $# -ge 2 ] || die "usage: start <port> <dir> [key=value ...]"
  local port=$1 dir=$2 cp pid; shift 2
  cp=$(classpath)
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if pid=$(broker_pid "$dir"); then die "already running in $dir (pid $pid)"; fi

  if [ -e "$dir/logs/meta.properties" ]; then
    # Restart: the storage is formatted for that server.properties; keep it.
    grep -q "^listeners=PLAINTEXT://127.0.0.1:$port," "$dir/server.properties" \
      || die "$dir was formatted for another port (see $dir/server.properties)"
    [ $# -eq 0 ] || echo "kafka-ref: restart of $dir: ignoring $*" >&2
  else
    write_server_properties "$port" "$dir" "$@"
    # transaction.version=1: the classic transactions protocol (no KIP-890
    # epoch bump per transaction), which is what doze-kafka implements; 4.3's
    # default would be 2.
    "$JAVA" -Dlog4j2.configurationFile="$HERE/log4j2-tools.xml" -cp "$cp" \
      kafka.tools.StorageTool format -t "$(cluster_id)" -c "$dir/server.properties" \
      --feature transaction.version=1 >"$dir/format.out" 2>&1 \
      || { cat "$dir/format.out" >&2; die "storage format failed"; }
  fi

  # Readiness is judged only on what this run appends to kafka.log.
  local log_from=0 t0=${EPOCHREALTIME/./}
  [ -e "$dir/kafka.log" ] && log_from=$(stat -c %s "$dir/kafka.log")
  # The JVM flags of Kafka's bin/kafka-run-class.sh (G1, short pauses,
  # headless). stdin/stdout detached, so a caller that captures our output
  # (subprocess, $(...)) is not held open by the broker.
  # shellcheck disable=SC2086  # HEAP_OPTS is a list of flags
  nohup "$JAVA" $HEAP_OPTS -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
    -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$HERE/log4j2-server.xml" \
    -Dkafka.logs.dir="$dir" -Dkafka.ref.log.level="${KAFKA_REF_LOG_LEVEL:-INFO}" \
    -cp "$cp" kafka.Kafka "$dir/server.properties" \
    </dev/null >>"$dir/kafka.out" 2>&1 &
  pid=$!
  echo "$pid" >"$dir/kafka.pid"

  # Ready = the broker logged "Kafka Server started" (after its listeners are
  # up and it is unfenced) and the port accepts a connection.
  until tail -c +"$((log_from + 1))" "$dir/kafka.log" 2>/dev/null | grep -q "Kafka Server started" \
        && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
      startup_errors "$dir" "$log_from"
      rm -f "$dir/kafka.pid"
      die "broker exited during startup (see $dir/kafka.log, $dir/kafka.out)"
    fi
    if (( ${EPOCHREALTIME/./} - t0 >= READY_TIMEOUT * 1000000 )); then
      startup_errors "$dir" "$log_from"
      cmd_stop "$dir"
      die "broker not ready within ${READY_TIMEOUT}s"
    fi
    sleep 0.2
  done
  local ms=$(( (${EPOCHREALTIME/./} - t0) / 1000 ))
  printf 'kafka-ref: Kafka 4.3.1 ready in %d.%03ds (pid %s, %s)\n' $((ms / 1000)) $((ms % 1000)) "$pid" "$dir" >&2
  echo "127.0.0.1:$port"
}

cmd_stop() {
  [ $# -eq 1 ] || die "usage: stop <dir>"
  local dir=$1 pid i
  if ! pid=$(broker_pid "$dir"); then
    rm -f "$dir/kafka.pid"
    echo "kafka-ref: not running in $dir" >&2
    return 0
  fi
  kill -TERM "$pid"
  for ((i = 0; i < STOP_TIMEOUT * 5; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "kafka-ref: pid $pid ignored SIGTERM for ${STOP_TIMEOUT}s; SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/kafka.pid"
}

cmd_tool() {
  [ $# -ge 1 ] || die "usage: tool <MainClass> [args...]"
  local cp
  cp=$(classpath)
  exec "$JAVA" -Xmx512m -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$HERE/log4j2-tools.xml" -cp "$cp" "$@"
}

case "${1:-}" in
  start) shift; cmd_start "$@" ;;
  stop)  shift; cmd_stop "$@" ;;
  tool)  shift; cmd_tool "$@" ;;
  *) die "usage: $0 start <port> <dir> [key=value ...] | stop <dir> | tool <MainClass> [args...]" ;;
esac
