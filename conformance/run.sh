#!/usr/bin/env bash
# Differential conformance: starts Apache Kafka 4.3.1 (tests/kafka_ref) and
# doze-kafka side by side on free loopback ports, plays conformance/scripts
# against both with the harness, and stops both whatever happens. Then the
# same with conformance/scripts-fast-expiry, on a second pair of brokers
# that look for expired offsets every 200 ms.
#   conformance/run.sh            compare (fails on a difference not in DIFFERENCES.md)
#   conformance/run.sh --record   also rewrite conformance/recordings/ from Kafka
# ONLY=<script name> plays one script; SCRIPTS=<dir> plays the scripts of
# another folder (a question for Kafka, asked once: conformance/README.md).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
WORK=$(mktemp -d /tmp/doze-conformance.XXXXXX)
DOZE_PID=
KAFKA_DIR=
stop_brokers() {
  # Reaped here: otherwise bash reports "Killed" for it later in the log
  # of a run that passed.
  [ -n "$DOZE_PID" ] && { kill -9 "$DOZE_PID"; wait "$DOZE_PID"; } 2>/dev/null || true
  [ -n "$KAFKA_DIR" ] && tests/kafka_ref/kafka-ref.sh stop "$KAFKA_DIR" >/dev/null 2>&1 || true
  DOZE_PID= KAFKA_DIR=
}
cleanup() {
  stop_brokers
  rm -rf "$WORK"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

RECORD=()
[ "${1:-}" = "--record" ] && RECORD=(--record conformance/recordings)
H=conformance/harness

# play DIR [KEY=VALUE...]: both brokers, with the same settings, answer the
# scripts of DIR; then both stop.
play() {
  local dir=$1 name
  shift
  if [ -n "${ONLY:-}" ] && [ ! -f "$dir/$ONLY.json" ]; then return 0; fi
  name=$(basename "$dir")
  local sets=()
  for p in "$@"; do sets+=(--set "$p"); done
  local doze_port
  doze_port=$(free_port)
  target/release/doze-kafka --listen "127.0.0.1:$doze_port" --data-dir "$WORK/doze-$name" \
    --set doze.console.listen=none "${sets[@]}" >"$WORK/doze-$name.log" 2>&1 &
  DOZE_PID=$!
  KAFKA_DIR="$WORK/kafka-$name"
  local kafka
  kafka=$(tests/kafka_ref/kafka-ref.sh start "$(free_port)" "$KAFKA_DIR" "$@" | tail -1)
  for _ in $(seq 100); do grep -q "doze-kafka listening on" "$WORK/doze-$name.log" && break; sleep 0.1; done
  grep -q "doze-kafka listening on" "$WORK/doze-$name.log" || { cat "$WORK/doze-$name.log"; return 1; }
  local status=0
  java -cp "$H/target/classes:$(cat $H/target/classpath.txt)" doze.conformance.Differ \
    --kafka "$kafka" --doze "127.0.0.1:$doze_port" --scripts "$dir" \
    --differences conformance/DIFFERENCES.md "${RECORD[@]}" ${ONLY:+--only "$ONLY"} || status=$?
  if [ $status -ne 0 ]; then
    echo "--- doze log (last 30 lines) ---"; tail -30 "$WORK/doze-$name.log"
  fi
  stop_brokers
  return $status
}

if [ -n "${SCRIPTS:-}" ]; then
  play "$SCRIPTS"
  exit
fi
status=0
play conformance/scripts || status=$?
# Expired offsets are looked for every 200 ms (Kafka's default is 10 min),
# so that `offset-expiry` sees them go. Not for the scripts above: each
# look also deletes empty groups with no offsets, and Kafka deletes one
# whose only member is still pending (between MEMBER_ID_REQUIRED and the
# JoinGroup that follows), which then answers that JoinGroup
# UNKNOWN_MEMBER_ID (`groups` failed so under make test).
play conformance/scripts-fast-expiry offsets.retention.check.interval.ms=200 || status=$?
exit $status
