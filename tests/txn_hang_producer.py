"""Opens a transaction, writes to it and never ends it; run as a subprocess by
test_txn_open.py, which SIGKILLs it mid-transaction.

    python txn_hang_producer.py <bootstrap> <topic> <transactional.id> <transaction.timeout.ms> <count>

Prints "OPEN <count>" once the records are acknowledged (so they are in the log
inside an open transaction), then sleeps until killed.
"""

import sys
import time

from confluent_kafka import Producer


def main():
    bootstrap, topic, txn_id, timeout_ms, count = sys.argv[1:6]
    timeout_ms, count = int(timeout_ms), int(count)
    p = Producer({
        "bootstrap.servers": bootstrap,
        "broker.address.family": "v4",
        "transactional.id": txn_id,
        "transaction.timeout.ms": timeout_ms,
        "message.timeout.ms": timeout_ms,
        "linger.ms": 5,
    })
    p.init_transactions(30)
    p.begin_transaction()
    acked = []
    for i in range(count):
        p.produce(topic, value=b"open-%d" % i,
                  on_delivery=lambda err, msg: acked.append(err))
    left = p.flush(30)
    if left or any(e is not None for e in acked):
        print(f"FAILED left={left} errors={[e for e in acked if e]}", flush=True)
        sys.exit(2)
    print(f"OPEN {count}", flush=True)
    while True:
        time.sleep(1)
        p.poll(0)


if __name__ == "__main__":
    main()
