package dozego

// (1) Exactly-once read-process-write with franz-go's GroupTransactSession.
//
// A copier (consumer group + transactional producer, read_committed,
// RequireStableFetchOffsets) moves numbered records from `in` to `out`, one
// transaction per polled batch, output partition = input partition. While it
// runs the test SIGKILLs and restarts the broker twice, and once abandons the
// copier in the middle of a transaction (its records produced and acknowledged,
// no EndTxn; its connections are cut so it never speaks again, as if its
// process had died) and starts a new copier with the same transactional id and
// group. At the end a read_committed reader sees every input record exactly
// once, in input order per partition; a read_uncommitted reader sees the
// abandoned transaction's records too (so the first check can fail); the
// group's committed offsets are the input's end offsets; and the new copier
// fenced the old one (same producer id, higher epoch).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	eosRecords    = 4000
	eosPartitions = 3
	eosBatch      = 40
	eosPace       = 40 * time.Millisecond // between transactions, so the kill points fall mid-run
	eosBudget     = 120 * time.Second
)

type copier struct {
	name   string
	sess   *kgo.GroupTransactSession
	dialer *cutDialer

	committed *atomic.Int64 // records in committed transactions, shared by all copiers
	commits   atomic.Int64
	aborts    atomic.Int64

	abandon   chan struct{} // closed by the test: abandon at the next transaction
	abandoned chan struct{} // closed by the copier once it is abandoned
	// set before abandoned is closed:
	abandonedValues []string
	pid             int64
	epoch           int16

	done chan struct{}
	err  error // why run returned (nil: ctx cancelled or abandoned)
	logf func(string, ...any)
}

func startCopier(t *testing.T, ctx context.Context, b *Broker, name, txnID, group, in, out string, committed *atomic.Int64) *copier {
	c := &copier{
		name:      name,
		dialer:    &cutDialer{},
		committed: committed,
		abandon:   make(chan struct{}),
		abandoned: make(chan struct{}),
		done:      make(chan struct{}),
		logf:      t.Logf,
	}
	sess, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(b.Addr()),
		kgo.ClientID(name),
		kgo.WithLogger(fileLogger(t, b, name, kgo.LogLevelInfo)),
		kgo.Dialer(c.dialer.Dial),
		kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(30*time.Second),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(in),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.SessionTimeout(6*time.Second),
		kgo.RebalanceTimeout(10*time.Second),
		kgo.HeartbeatInterval(500*time.Millisecond),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DefaultProduceTopic(out),
	)
	if err != nil {
		t.Fatalf("%s: NewGroupTransactSession: %v", name, err)
	}
	c.sess = sess
	go func() {
		defer close(c.done)
		c.err = c.run(ctx)
	}()
	return c
}

func (c *copier) run(ctx context.Context) error {
	for ctx.Err() == nil {
		pollCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		fs := c.sess.PollRecords(pollCtx, eosBatch)
		cancel()
		if fs.IsClientClosed() {
			return errors.New("client closed")
		}
		for _, e := range fs.Errors() {
			if !errors.Is(e.Err, context.DeadlineExceeded) && !errors.Is(e.Err, context.Canceled) {
				c.logf("%s: fetch error %s/%d: %v", c.name, e.Topic, e.Partition, e.Err)
			}
		}
		recs := fs.Records()
		if len(recs) == 0 {
			continue
		}
		if err := c.sess.Begin(); err != nil {
			return fmt.Errorf("Begin: %w", err)
		}
		var (
			mu       sync.Mutex
			prodErrs []error
			wg       sync.WaitGroup
		)
		for _, r := range recs {
			wg.Add(1)
			c.sess.Produce(ctx, &kgo.Record{Partition: r.Partition, Key: r.Key, Value: r.Value},
				func(_ *kgo.Record, err error) {
					defer wg.Done()
					if err != nil {
						mu.Lock()
						prodErrs = append(prodErrs, err)
						mu.Unlock()
					}
				})
		}
		select {
		case <-c.abandon:
			// Die mid-transaction: wait until the broker has acknowledged this
			// transaction's records, then go silent without EndTxn.
			wg.Wait()
			if len(prodErrs) > 0 {
				return fmt.Errorf("producing before abandoning: %v", prodErrs)
			}
			pid, epoch, err := c.sess.Client().ProducerID(ctx)
			if err != nil {
				return fmt.Errorf("ProducerID before abandoning: %w", err)
			}
			c.pid, c.epoch = pid, epoch
			for _, r := range recs {
				c.abandonedValues = append(c.abandonedValues, string(r.Value))
			}
			c.dialer.Cut()
			close(c.abandoned)
			return nil
		default:
		}
		endCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
		committed, err := c.sess.End(endCtx, kgo.TryCommit)
		cancel()
		wg.Wait()
		if err != nil {
			return fmt.Errorf("End(TryCommit) after %d commits: %w (produce errors: %v)", c.commits.Load(), err, prodErrs)
		}
		if committed {
			if len(prodErrs) > 0 {
				return fmt.Errorf("End committed a transaction whose produces failed: %v", prodErrs)
			}
			c.commits.Add(1)
			c.committed.Add(int64(len(recs)))
		} else {
			c.aborts.Add(1)
		}
		select {
		case <-ctx.Done():
		case <-time.After(eosPace):
		}
	}
	return nil
}

func TestGroupTransactSessionCopierSurvivesKillsAndFencing(t *testing.T) {
	b := StartBroker(t, txnBrokerSets...)
	adm := newAdmin(t, b, "admin")
	in, out := "eos-in", "eos-out"
	const txnID, group = "go-eos-copier", "go-eos-copier-group"
	createTopic(t, adm, in, eosPartitions)
	createTopic(t, adm, out, eosPartitions)
	want := produceNumbered(t, b, in, eosPartitions, eosRecords, "rec")

	ctx := testCtx(t, eosBudget+60*time.Second)
	runCtx, stopCopiers := context.WithCancel(ctx)
	defer stopCopiers()
	var committed atomic.Int64
	copierA := startCopier(t, runCtx, b, "copier-a", txnID, group, in, out, &committed)
	var copierB *copier
	defer func() {
		stopCopiers()
		for _, c := range []*copier{copierA, copierB} {
			if c == nil {
				continue
			}
			<-c.done
			closeBounded(t, c.name, c.sess.Close)
		}
	}()

	deadline := time.Now().Add(eosBudget)
	waitProgress := func(what string, frac float64) int64 {
		t.Helper()
		target := int64(frac * eosRecords)
		for {
			n := committed.Load()
			if n >= target {
				if n >= eosRecords {
					t.Fatalf("%s: the copier had already copied everything (%d records) -- the step would not be mid-run", what, n)
				}
				return n
			}
			for _, c := range []*copier{copierA, copierB} {
				if c == nil {
					continue
				}
				select {
				case <-c.done:
					if c.err != nil || c == copierB || c.abandonedValues == nil {
						t.Fatalf("%s: %s stopped (committed %d): %v", what, c.name, n, c.err)
					}
				default:
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: only %d of %d records copied within %v", what, n, eosRecords, eosBudget)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// First broker crash, a fifth of the way in.
	n := waitProgress("kill 1", 0.2)
	b.Restart()
	t.Logf("broker SIGKILLed and restarted at %d committed records", n)

	// Abandon copier A in the middle of a transaction; copier B takes over.
	n = waitProgress("abandon", 0.45)
	close(copierA.abandon)
	select {
	case <-copierA.abandoned:
	case <-copierA.done:
		t.Fatalf("copier A stopped before it could be abandoned: %v", copierA.err)
	case <-time.After(30 * time.Second):
		t.Fatalf("copier A was not abandoned within 30s")
	}
	t.Logf("copier A abandoned at %d committed records with %d records in its open transaction (producer id %d epoch %d)",
		n, len(copierA.abandonedValues), copierA.pid, copierA.epoch)
	if len(copierA.abandonedValues) == 0 {
		t.Fatalf("copier A abandoned an empty transaction")
	}
	copierB = startCopier(t, runCtx, b, "copier-b", txnID, group, in, out, &committed)

	// Second broker crash, with copier B running.
	n = waitProgress("kill 2", 0.7)
	if copierB.commits.Load() == 0 {
		t.Fatalf("kill 2 at %d records, but copier B has not committed yet", n)
	}
	b.Restart()
	t.Logf("broker SIGKILLed and restarted at %d committed records", n)

	// Done when the group's committed offsets reach the input's end offsets.
	end := map[int32]int64{}
	for p, vs := range want {
		end[p] = int64(len(vs))
	}
	for {
		if time.Now().After(deadline) {
			t.Fatalf("copy not finished within %v: %d records committed, copier B: %d commits, %d aborts, err %v",
				eosBudget, committed.Load(), copierB.commits.Load(), copierB.aborts.Load(), copierB.err)
		}
		select {
		case <-copierB.done:
			t.Fatalf("copier B stopped after %d commits: %v", copierB.commits.Load(), copierB.err)
		default:
		}
		if groupOffsetsReached(ctx, adm, group, in, end) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopCopiers()
	<-copierB.done
	if copierB.err != nil {
		t.Fatalf("copier B: %v", copierB.err)
	}
	t.Logf("copy done: %d records in committed transactions; copier A %d commits / %d aborts, copier B %d commits / %d aborts",
		committed.Load(), copierA.commits.Load(), copierA.aborts.Load(), copierB.commits.Load(), copierB.aborts.Load())

	// B's InitProducerId fenced A: same producer id, a later epoch.
	pidB, epochB, err := copierB.sess.Client().ProducerID(ctx)
	if err != nil {
		t.Fatalf("copier B ProducerID: %v", err)
	}
	if pidB != copierA.pid || epochB <= copierA.epoch {
		t.Errorf("copier B has producer id %d epoch %d; expected id %d (as copier A) with an epoch above %d",
			pidB, epochB, copierA.pid, copierA.epoch)
	}

	sentinels := writeSentinels(t, b, out, eosPartitions)
	got := readUntil(t, b, "read-committed", out, sentinels, kgo.ReadCommitted(), 60*time.Second)
	total := 0
	for p := int32(0); p < eosPartitions; p++ {
		total += len(got[p])
		if !equalStrings(got[p], want[p]) {
			t.Errorf("read_committed %s/%d: %d records, expected %d (input order, each once); %s",
				out, p, len(got[p]), len(want[p]), firstDiff(got[p], want[p]))
		}
	}
	t.Logf("read_committed %s: %d records", out, total)

	// read_uncommitted also sees the abandoned (aborted) transaction's
	// records: the check above is able to fail.
	all := readUntil(t, b, "read-uncommitted", out, sentinels, kgo.ReadUncommitted(), 60*time.Second)
	counts := map[string]int{}
	totalAll := 0
	for _, vs := range all {
		totalAll += len(vs)
		for _, v := range vs {
			counts[v]++
		}
	}
	for _, v := range copierA.abandonedValues {
		if counts[v] < 2 {
			t.Errorf("read_uncommitted sees %q %d times; expected the abandoned copy and the committed one", v, counts[v])
		}
	}
	if totalAll < eosRecords+len(copierA.abandonedValues) {
		t.Errorf("read_uncommitted %s: %d records, expected at least %d", out, totalAll, eosRecords+len(copierA.abandonedValues))
	}
	t.Logf("read_uncommitted %s: %d records", out, totalAll)

	// The group's committed offsets are exactly the input's end offsets.
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("FetchOffsets %s: %v", group, err)
	}
	for p, e := range end {
		o, ok := offs.Lookup(in, p)
		if !ok || o.Err != nil || o.At != e {
			t.Errorf("group %s committed %s/%d = %+v (found %v); expected %d", group, in, p, o, ok, e)
		}
	}
}

func groupOffsetsReached(ctx context.Context, adm *kadm.Client, group, topic string, end map[int32]int64) bool {
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	offs, err := adm.FetchOffsets(c, group)
	if err != nil {
		return false
	}
	for p, e := range end {
		o, ok := offs.Lookup(topic, p)
		if !ok || o.Err != nil || o.At < e {
			return false
		}
	}
	return true
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func firstDiff(got, want []string) string {
	for i := 0; i < len(got) && i < len(want); i++ {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference at index %d: got %q, want %q", i, got[i], want[i])
		}
	}
	if len(got) > len(want) {
		return fmt.Sprintf("extra records from index %d: %q...", len(want), got[len(want)])
	}
	if len(got) < len(want) {
		return fmt.Sprintf("missing records from index %d: %q...", len(got), want[len(got)])
	}
	return "identical"
}
