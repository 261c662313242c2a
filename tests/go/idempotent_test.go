package dozego

// (2) franz-go's idempotent producer (its default: acks=all, up to 5 requests
// in flight per broker, unlimited retries) keeps producing while the broker is
// SIGKILLed and restarted twice. Every acknowledged record is in the log
// exactly once, in the order produced per partition; no record is written
// twice; and the producer kept its producer id and epoch across the restarts,
// that is the broker's restored producer state accepted its retried batches'
// sequence numbers without OUT_OF_ORDER_SEQUENCE_NUMBER / UNKNOWN_PRODUCER_ID.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	idemRecords    = 20000
	idemPartitions = 3
)

func TestIdempotentProducerAcrossBrokerKill(t *testing.T) {
	b := StartBroker(t)
	adm := newAdmin(t, b, "admin")
	topic := "idem"
	createTopic(t, adm, topic, idemPartitions)

	cl := newClient(t, b, "idem-producer",
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond),
		// Produce blocks while 1,000 records are unacknowledged: the producer
		// always has records buffered or in flight, so each kill finds some.
		kgo.MaxBufferedRecords(1000))
	ctx := testCtx(t, 150*time.Second)

	// The producer's id, before anything is produced.
	pid0, epoch0, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatalf("ProducerID: %v", err)
	}

	var (
		mu      sync.Mutex
		acked   = map[string]bool{}
		failed  = map[string]error{}
		nAcked  atomic.Int64
		nSent   atomic.Int64 // records handed to Produce
		started = make(chan struct{})
	)
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		close(started)
		for i := 0; i < idemRecords && ctx.Err() == nil; i++ {
			v := fmt.Sprintf("idem-%06d", i)
			nSent.Add(1)
			cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: int32(i % idemPartitions), Value: []byte(v)},
				func(r *kgo.Record, err error) {
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						failed[v] = err
						return
					}
					acked[v] = true
					nAcked.Add(1)
				})
		}
	}()
	<-started

	for k, frac := range []float64{0.25, 0.6} {
		target := int64(frac * idemRecords)
		// Past the target, and with records handed over but not yet acknowledged.
		for nAcked.Load() < target || nSent.Load()-nAcked.Load() < 100 {
			if ctx.Err() != nil {
				t.Fatalf("kill %d: %d records acknowledged of %d handed over; wanted %d acknowledged and 100 outstanding",
					k+1, nAcked.Load(), nSent.Load(), target)
			}
			time.Sleep(time.Millisecond)
		}
		b.Kill9()
		n, sent := nAcked.Load(), nSent.Load()
		if n >= idemRecords || sent == n {
			t.Fatalf("kill %d: %d records acknowledged of %d handed to the producer: nothing was outstanding", k+1, n, sent)
		}
		b.Restart()
		t.Logf("broker SIGKILLed with %d of %d records acknowledged and %d outstanding; restarted", n, idemRecords, sent-n)
	}

	<-produced
	flushCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := cl.Flush(flushCtx); err != nil {
		t.Fatalf("Flush: %v (%d acknowledged)", err, nAcked.Load())
	}
	mu.Lock()
	nFailed := len(failed)
	var firstFail error
	for _, e := range failed {
		firstFail = e
		break
	}
	mu.Unlock()
	t.Logf("%d records acknowledged, %d failed (first error: %v)", len(acked), nFailed, firstFail)
	if len(acked)+nFailed != idemRecords {
		t.Fatalf("%d acknowledged + %d failed != %d produced", len(acked), nFailed, idemRecords)
	}
	// With unlimited retries and no delivery timeout, franz-go fails a record
	// only on a non-retryable broker answer (e.g. OUT_OF_ORDER_SEQUENCE_NUMBER).
	if nFailed > 0 {
		t.Errorf("%d records failed; first error: %v", nFailed, firstFail)
	}

	pid1, epoch1, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatalf("ProducerID after the restarts: %v", err)
	}
	if pid1 != pid0 || epoch1 != epoch0 {
		t.Errorf("producer id/epoch changed across the restarts: %d/%d -> %d/%d (the producer was reset)",
			pid0, epoch0, pid1, epoch1)
	}

	sentinels := writeSentinels(t, b, topic, idemPartitions)
	got := readUntil(t, b, "reader", topic, sentinels, kgo.ReadUncommitted(), 60*time.Second)
	seen := map[string]int{}
	for p := int32(0); p < idemPartitions; p++ {
		last := -1
		for _, v := range got[p] {
			seen[v]++
			var i int
			if _, err := fmt.Sscanf(v, "idem-%06d", &i); err != nil || i%idemPartitions != int(p) {
				t.Errorf("partition %d holds unexpected record %q", p, v)
				continue
			}
			if i <= last {
				t.Errorf("partition %d: %q after idem-%06d (out of order or duplicate)", p, v, last)
			}
			last = i
		}
	}
	missing, dups := 0, 0
	for v := range acked {
		if seen[v] == 0 {
			missing++
			if missing <= 5 {
				t.Errorf("acknowledged record %q is not in the log", v)
			}
		}
	}
	for v, n := range seen {
		if n > 1 {
			dups++
			if dups <= 5 {
				t.Errorf("record %q is in the log %d times", v, n)
			}
		}
	}
	if missing > 0 || dups > 0 {
		t.Errorf("%d acknowledged records missing, %d records duplicated", missing, dups)
	}
	t.Logf("log holds %d distinct records", len(seen))
}
