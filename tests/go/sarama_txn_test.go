package dozego

// (3) Sarama's transactional producer (Transaction.ID, Idempotent,
// MaxOpenRequests=1, Version V4_0_0_0: request versions negotiated down to
// what the broker's ApiVersions offers).
//
//   - One transaction committed, one aborted, then a committed sentinel: a
//     ReadCommitted Sarama consumer sees only the committed records, a
//     ReadUncommitted one sees the aborted ones as well.
//   - Read-process-write in a Sarama consumer group: each input message is
//     copied in its own transaction with AddMessageToTxn (the group offset
//     commit inside the transaction); the committed offset is visible through
//     OffsetFetch right after each CommitTxn, and an aborted transaction
//     neither shows its record to read_committed nor moves the offset. Then
//     AddOffsetsToTxn with explicit offsets (and metadata) for another group:
//     committed is visible, aborted is not.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

var saramaVersion = sarama.V4_0_0_0

// Sarama logs through one global logger, read by its goroutines (some outlive
// a Close); it is set once, and each test points its writer at a log file.
var saramaSink = &switchWriter{}

func init() {
	sarama.Logger = log.New(saramaSink, "[sarama] ", log.LstdFlags|log.Lmicroseconds)
}

type switchWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *switchWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return len(p), nil
	}
	return s.w.Write(p)
}

// saramaLog sends Sarama's log to sarama.log of this test.
func saramaLog(t *testing.T, b *Broker) {
	f, err := os.Create(b.AddLog("sarama.log"))
	if err != nil {
		t.Fatal(err)
	}
	saramaSink.mu.Lock()
	saramaSink.w = f
	saramaSink.mu.Unlock()
	t.Cleanup(func() {
		saramaSink.mu.Lock()
		saramaSink.w = nil
		saramaSink.mu.Unlock()
		f.Close()
	})
}

func saramaConfig(clientID string) *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = saramaVersion
	cfg.ClientID = clientID
	cfg.Net.DialTimeout = 5 * time.Second
	cfg.Net.ReadTimeout = 15 * time.Second
	cfg.Net.WriteTimeout = 15 * time.Second
	cfg.Metadata.Retry.Max = 10
	cfg.Metadata.Retry.Backoff = 200 * time.Millisecond
	return cfg
}

func saramaTxnProducer(t *testing.T, b *Broker, txnID string) sarama.SyncProducer {
	t.Helper()
	cfg := saramaConfig("sarama-" + txnID)
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Transaction.ID = txnID
	cfg.Producer.Transaction.Timeout = 20 * time.Second
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Net.MaxOpenRequests = 1
	p, err := sarama.NewSyncProducer([]string{b.Addr()}, cfg)
	if err != nil {
		t.Fatalf("sarama.NewSyncProducer (transactional.id %s): %v", txnID, err)
	}
	t.Cleanup(func() {
		closeBounded(t, "sarama producer "+txnID, func() {
			if err := p.Close(); err != nil {
				t.Errorf("closing the Sarama producer %s: %v", txnID, err)
			}
		})
	})
	if !p.IsTransactional() {
		t.Fatalf("Sarama producer with transactional.id %s is not transactional", txnID)
	}
	return p
}

func saramaAdmin(t *testing.T, b *Broker) sarama.ClusterAdmin {
	t.Helper()
	adm, err := sarama.NewClusterAdmin([]string{b.Addr()}, saramaConfig("sarama-admin"))
	if err != nil {
		t.Fatalf("sarama.NewClusterAdmin: %v", err)
	}
	t.Cleanup(func() { closeBounded(t, "sarama admin", func() { adm.Close() }) })
	return adm
}

func inTxn(t *testing.T, p sarama.SyncProducer, what string, commit bool, fn func() error) {
	t.Helper()
	if err := p.BeginTxn(); err != nil {
		t.Fatalf("%s: BeginTxn: %v", what, err)
	}
	if err := fn(); err != nil {
		t.Fatalf("%s: %v (txn status %v)", what, err, p.TxnStatus())
	}
	if commit {
		if err := p.CommitTxn(); err != nil {
			t.Fatalf("%s: CommitTxn: %v (txn status %v)", what, err, p.TxnStatus())
		}
	} else if err := p.AbortTxn(); err != nil {
		t.Fatalf("%s: AbortTxn: %v (txn status %v)", what, err, p.TxnStatus())
	}
	if st := p.TxnStatus(); st&sarama.ProducerTxnFlagReady == 0 || st&sarama.ProducerTxnFlagInError != 0 {
		t.Fatalf("%s: producer not ready after ending the transaction: status %v", what, st)
	}
}

func sendAll(p sarama.SyncProducer, topic string, partitions int32, values []string) error {
	msgs := make([]*sarama.ProducerMessage, len(values))
	for i, v := range values {
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Partition: int32(i) % partitions, Value: sarama.StringEncoder(v)}
	}
	return p.SendMessages(msgs)
}

// saramaReadUntilSentinel reads every partition from the oldest offset with a
// Sarama consumer at the given isolation level until it delivers the sentinel
// value, and returns the values before it.
func saramaReadUntilSentinel(t *testing.T, b *Broker, topic string, partitions int32, iso sarama.IsolationLevel) map[int32][]string {
	t.Helper()
	cfg := saramaConfig(fmt.Sprintf("sarama-reader-%d", iso))
	cfg.Consumer.IsolationLevel = iso
	cfg.Consumer.Return.Errors = true
	c, err := sarama.NewConsumer([]string{b.Addr()}, cfg)
	if err != nil {
		t.Fatalf("sarama.NewConsumer: %v", err)
	}
	defer closeBounded(t, "sarama consumer", func() { c.Close() })
	got := map[int32][]string{}
	for p := int32(0); p < partitions; p++ {
		pc, err := c.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatalf("ConsumePartition %s/%d: %v", topic, p, err)
		}
		timeout := time.After(30 * time.Second)
	read:
		for {
			select {
			case m := <-pc.Messages():
				if string(m.Value) == sentinel {
					break read
				}
				got[p] = append(got[p], string(m.Value))
			case e := <-pc.Errors():
				t.Fatalf("Sarama consumer (isolation %d) %s/%d: %v", iso, topic, p, e)
			case <-timeout:
				t.Fatalf("Sarama consumer (isolation %d) %s/%d: no sentinel within 30s; read %q", iso, topic, p, got[p])
			}
		}
		pc.AsyncClose()
	}
	return got
}

func TestSaramaTransactionCommitAndAbort(t *testing.T) {
	b := StartBroker(t, txnBrokerSets...)
	saramaLog(t, b)
	adm := newAdmin(t, b, "admin")
	topic := "sarama-txn"
	const parts = 2
	createTopic(t, adm, topic, parts)
	p := saramaTxnProducer(t, b, "sarama-commit-abort")

	committed := []string{"c-0", "c-1", "c-2", "c-3", "c-4", "c-5"}
	aborted := []string{"a-0", "a-1", "a-2", "a-3", "a-4", "a-5"}
	inTxn(t, p, "committed txn", true, func() error { return sendAll(p, topic, parts, committed) })
	inTxn(t, p, "aborted txn", false, func() error { return sendAll(p, topic, parts, aborted) })
	// A committed sentinel per partition: a reader that reaches it has seen
	// (or skipped) everything before it.
	inTxn(t, p, "sentinel txn", true, func() error { return sendAll(p, topic, parts, []string{sentinel, sentinel}) })

	wantRC := map[int32][]string{0: {"c-0", "c-2", "c-4"}, 1: {"c-1", "c-3", "c-5"}}
	wantRU := map[int32][]string{0: {"c-0", "c-2", "c-4", "a-0", "a-2", "a-4"}, 1: {"c-1", "c-3", "c-5", "a-1", "a-3", "a-5"}}
	rc := saramaReadUntilSentinel(t, b, topic, parts, sarama.ReadCommitted)
	ru := saramaReadUntilSentinel(t, b, topic, parts, sarama.ReadUncommitted)
	for q := int32(0); q < parts; q++ {
		if !equalStrings(rc[q], wantRC[q]) {
			t.Errorf("ReadCommitted %s/%d = %q, want %q", topic, q, rc[q], wantRC[q])
		}
		if !equalStrings(ru[q], wantRU[q]) {
			t.Errorf("ReadUncommitted %s/%d = %q, want %q", topic, q, ru[q], wantRU[q])
		}
	}
}

// eosHandler copies each message of its claims in its own transaction.
type eosHandler struct {
	p        sarama.SyncProducer
	adm      sarama.ClusterAdmin
	group    string
	out      string
	lastOffs map[int32]int64 // input partition -> number of messages in it

	mu         sync.Mutex
	abortedOne bool
	done       map[int32]bool
	allDone    chan struct{}
	err        error
}

func (h *eosHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *eosHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *eosHandler) fail(err error) error {
	h.mu.Lock()
	if h.err == nil {
		h.err = err
	}
	h.mu.Unlock()
	return err
}

// committedOffset is the group's committed offset for in/partition via
// OffsetFetch (-1: none).
func (h *eosHandler) committedOffset(topic string, partition int32) (int64, string, error) {
	resp, err := h.adm.ListConsumerGroupOffsets(h.group, map[string][]int32{topic: {partition}})
	if err != nil {
		return 0, "", err
	}
	blk := resp.GetBlock(topic, partition)
	if blk == nil {
		return 0, "", fmt.Errorf("OffsetFetch %s: no block for %s/%d", h.group, topic, partition)
	}
	if !errors.Is(blk.Err, sarama.ErrNoError) {
		return 0, "", fmt.Errorf("OffsetFetch %s %s/%d: %w", h.group, topic, partition, blk.Err)
	}
	return blk.Offset, blk.Metadata, nil
}

func (h *eosHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		if err := h.copyOne(msg); err != nil {
			return h.fail(err)
		}
		if msg.Offset+1 == h.lastOffs[msg.Partition] {
			h.mu.Lock()
			h.done[msg.Partition] = true
			if len(h.done) == len(h.lastOffs) {
				close(h.allDone)
			}
			h.mu.Unlock()
		}
	}
	return nil
}

func (h *eosHandler) copyOne(msg *sarama.ConsumerMessage) error {
	h.mu.Lock()
	defer h.mu.Unlock() // one transaction at a time on the shared producer
	before, _, err := h.committedOffset(msg.Topic, msg.Partition)
	if err != nil {
		return err
	}
	if before != msg.Offset && !(before == -1 && msg.Offset == 0) {
		return fmt.Errorf("consuming %s/%d at offset %d, but the group's committed offset is %d",
			msg.Topic, msg.Partition, msg.Offset, before)
	}
	if !h.abortedOne {
		// The first message is copied once in a transaction that aborts.
		h.abortedOne = true
		if err := h.p.BeginTxn(); err != nil {
			return fmt.Errorf("BeginTxn (aborted): %w", err)
		}
		if _, _, err := h.p.SendMessage(&sarama.ProducerMessage{Topic: h.out, Partition: msg.Partition,
			Value: sarama.StringEncoder("aborted:" + string(msg.Value))}); err != nil {
			return fmt.Errorf("SendMessage (aborted txn): %w", err)
		}
		if err := h.p.AddMessageToTxn(msg, h.group, nil); err != nil {
			return fmt.Errorf("AddMessageToTxn (aborted txn): %w", err)
		}
		if err := h.p.AbortTxn(); err != nil {
			return fmt.Errorf("AbortTxn: %w", err)
		}
		after, _, err := h.committedOffset(msg.Topic, msg.Partition)
		if err != nil {
			return err
		}
		if after != before {
			return fmt.Errorf("aborted transaction moved %s/%d's committed offset from %d to %d", msg.Topic, msg.Partition, before, after)
		}
	}
	if err := h.p.BeginTxn(); err != nil {
		return fmt.Errorf("BeginTxn: %w", err)
	}
	if _, _, err := h.p.SendMessage(&sarama.ProducerMessage{Topic: h.out, Partition: msg.Partition,
		Value: sarama.ByteEncoder(msg.Value)}); err != nil {
		return fmt.Errorf("SendMessage: %w", err)
	}
	meta := fmt.Sprintf("copied %s", msg.Value)
	if err := h.p.AddMessageToTxn(msg, h.group, &meta); err != nil {
		return fmt.Errorf("AddMessageToTxn: %w", err)
	}
	if err := h.p.CommitTxn(); err != nil {
		return fmt.Errorf("CommitTxn: %w (status %v)", err, h.p.TxnStatus())
	}
	after, gotMeta, err := h.committedOffset(msg.Topic, msg.Partition)
	if err != nil {
		return err
	}
	if after != msg.Offset+1 || gotMeta != meta {
		return fmt.Errorf("after CommitTxn the group's committed offset for %s/%d is %d %q, want %d %q",
			msg.Topic, msg.Partition, after, gotMeta, msg.Offset+1, meta)
	}
	return nil
}

func TestSaramaTxnOffsetCommitInConsumerGroup(t *testing.T) {
	b := StartBroker(t, txnBrokerSets...)
	saramaLog(t, b)
	adm := newAdmin(t, b, "admin")
	in, out := "sarama-eos-in", "sarama-eos-out"
	const parts = 2
	const records = 30
	createTopic(t, adm, in, parts)
	createTopic(t, adm, out, parts)
	want := produceNumbered(t, b, in, parts, records, "s")
	group := "sarama-eos-group"

	h := &eosHandler{
		p: saramaTxnProducer(t, b, "sarama-eos"), adm: saramaAdmin(t, b),
		group: group, out: out, lastOffs: map[int32]int64{},
		done: map[int32]bool{}, allDone: make(chan struct{}),
	}
	for q, vs := range want {
		h.lastOffs[q] = int64(len(vs))
	}

	cfg := saramaConfig("sarama-eos-consumer")
	cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cfg.Consumer.Return.Errors = true
	cg, err := sarama.NewConsumerGroup([]string{b.Addr()}, group, cfg)
	if err != nil {
		t.Fatalf("sarama.NewConsumerGroup: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var groupErrs []error
	var geMu sync.Mutex
	go func() {
		for e := range cg.Errors() {
			geMu.Lock()
			groupErrs = append(groupErrs, e)
			geMu.Unlock()
		}
	}()
	consumed := make(chan error, 1)
	go func() {
		var err error
		for ctx.Err() == nil {
			if err = cg.Consume(ctx, []string{in}, h); err != nil {
				break
			}
		}
		consumed <- err
	}()
	select {
	case <-h.allDone:
	case err := <-consumed:
		t.Fatalf("consumer group stopped before copying everything: %v (handler: %v)", err, h.err)
	case <-ctx.Done():
		h.mu.Lock()
		t.Fatalf("not copied within 90s: partitions done %v, handler error %v", h.done, h.err)
	}
	cancel()
	if err := <-consumed; err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, sarama.ErrClosedConsumerGroup) {
		t.Errorf("Consume: %v", err)
	}
	closeBounded(t, "sarama consumer group", func() {
		if err := cg.Close(); err != nil {
			t.Errorf("closing the consumer group: %v", err)
		}
	})
	if h.err != nil {
		t.Fatalf("handler: %v", h.err)
	}
	geMu.Lock()
	for _, e := range groupErrs {
		t.Errorf("consumer group error: %v", e)
	}
	geMu.Unlock()

	// The group's offsets are the input's ends (via franz-go's kadm too).
	offs, err := adm.FetchOffsets(testCtx(t, 20*time.Second), group)
	if err != nil {
		t.Fatalf("FetchOffsets %s: %v", group, err)
	}
	for q, e := range h.lastOffs {
		o, ok := offs.Lookup(in, q)
		if !ok || o.At != e {
			t.Errorf("group %s committed %s/%d = %v (found %v), want %d", group, in, q, o.At, ok, e)
		}
	}

	// Output: every input once under read_committed; the aborted copy too
	// under read_uncommitted.
	p := h.p
	inTxn(t, p, "sentinel txn", true, func() error { return sendAll(p, out, parts, []string{sentinel, sentinel}) })
	rc := saramaReadUntilSentinel(t, b, out, parts, sarama.ReadCommitted)
	ru := saramaReadUntilSentinel(t, b, out, parts, sarama.ReadUncommitted)
	nAborted := 0
	for q := int32(0); q < parts; q++ {
		if !equalStrings(rc[q], want[q]) {
			t.Errorf("ReadCommitted %s/%d: %s", out, q, firstDiff(rc[q], want[q]))
		}
		for _, v := range ru[q] {
			if len(v) > 8 && v[:8] == "aborted:" {
				nAborted++
			}
		}
		if len(ru[q]) < len(want[q]) {
			t.Errorf("ReadUncommitted %s/%d: %d records, want at least %d", out, q, len(ru[q]), len(want[q]))
		}
	}
	if nAborted != 1 {
		t.Errorf("ReadUncommitted %s: %d aborted copies, want 1", out, nAborted)
	}

	// AddOffsetsToTxn with explicit offsets and metadata for another group.
	other := "sarama-explicit-group"
	h.group = other
	check := func(what string, wantOff int64, wantMeta string) {
		t.Helper()
		off, meta, err := h.committedOffset(in, 1)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if off != wantOff || (wantOff >= 0 && meta != wantMeta) {
			t.Errorf("%s: group %s committed %s/1 = %d %q, want %d %q", what, other, in, off, meta, wantOff, wantMeta)
		}
	}
	offsets := func(off int64, meta string) map[string][]*sarama.PartitionOffsetMetadata {
		return map[string][]*sarama.PartitionOffsetMetadata{in: {{Partition: 1, Offset: off, Metadata: &meta}}}
	}
	check("before any transaction", -1, "")
	inTxn(t, p, "AddOffsetsToTxn commit", true, func() error {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: out, Partition: 0, Value: sarama.StringEncoder("explicit")}); err != nil {
			return err
		}
		return p.AddOffsetsToTxn(offsets(7, "seven"), other)
	})
	check("after the committed AddOffsetsToTxn", 7, "seven")
	inTxn(t, p, "AddOffsetsToTxn abort", false, func() error {
		return p.AddOffsetsToTxn(offsets(9, "nine"), other)
	})
	check("after the aborted AddOffsetsToTxn", 7, "seven")
	// Offsets alone (no records) in a committed transaction.
	inTxn(t, p, "AddOffsetsToTxn commit, offsets only", true, func() error {
		return p.AddOffsetsToTxn(offsets(11, "eleven"), other)
	})
	check("after the committed offsets-only transaction", 11, "eleven")
}
