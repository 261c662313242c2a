#!/usr/bin/env bash
# Differential conformance: starts Apache Kafka 4.3.1 (tests/kafka_ref) and
# doze-kafka side by side on free loopback ports, plays conformance/scripts
# against both with the harness, and stops both whatever happens.
#   conformance/run.sh            compare (fails on a difference not in DIFFERENCES.md)
#   conformance/run.sh --record   also rewrite conformance/recordings/ from Kafka
# ONLY=<script name> plays one script; SCRIPTS=<dir> plays the scripts of
# another folder (a question for Kafka, asked once: conformance/README.md).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
WORK=$(mktemp -d /tmp/doze-conformance.XXXXXX)
DOZE_PID=
cleanup() {
  [ -n "$DOZE_PID" ] && kill -9 "$DOZE_PID" 2>/dev/null || true
  tests/kafka_ref/kafka-ref.sh stop "$WORK/kafka" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Settings both brokers run with: expired offsets looked for every 200 ms
# (Kafka's default is 10 min), so that `offset-expiry` sees them go.
PROPS=(offsets.retention.check.interval.ms=200)
DOZE_PORT=$(free_port)
target/release/doze-kafka --listen "127.0.0.1:$DOZE_PORT" --data-dir "$WORK/doze" --set doze.console.listen=none \
  "${PROPS[@]/#/--set=}" >"$WORK/doze.log" 2>&1 &
DOZE_PID=$!
KAFKA=$(tests/kafka_ref/kafka-ref.sh start "$(free_port)" "$WORK/kafka" "${PROPS[@]}" | tail -1)
for _ in $(seq 100); do grep -q "doze-kafka listening on" "$WORK/doze.log" && break; sleep 0.1; done
grep -q "doze-kafka listening on" "$WORK/doze.log" || { cat "$WORK/doze.log"; exit 1; }

RECORD=()
[ "${1:-}" = "--record" ] && RECORD=(--record conformance/recordings)
H=conformance/harness
status=0
java -cp "$H/target/classes:$(cat $H/target/classpath.txt)" doze.conformance.Differ \
  --kafka "$KAFKA" --doze "127.0.0.1:$DOZE_PORT" --scripts "${SCRIPTS:-conformance/scripts}" \
  --differences conformance/DIFFERENCES.md "${RECORD[@]}" ${ONLY:+--only "$ONLY"} || status=$?
if [ $status -ne 0 ]; then
  echo "--- doze log (last 30 lines) ---"; tail -30 "$WORK/doze.log"
fi
exit $status
