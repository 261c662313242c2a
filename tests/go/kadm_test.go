package dozego

// (4) franz-go's admin client (kadm) against the broker's transaction and
// group state.
//
//   - An open transaction (records in partition 1, group offsets committed
//     inside it with AddOffsetsToTxn + TxnOffsetCommit): ListTransactions
//     (with state and producer-id filters), DescribeTransactions and
//     DescribeProducers describe it as Ongoing, the pending offset is not
//     visible to FetchOffsets (and is UNSTABLE_OFFSET_COMMIT with
//     RequireStable); after the commit they describe CompleteCommit, no
//     open transaction, and the offset.
//   - A consumer group with one live member: ListGroups, DescribeGroups
//     (state, protocol, member, assignment) and FetchOffsets; then Empty
//     after the member leaves, offsets kept.

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestKadmDescribesOpenTransaction(t *testing.T) {
	b := StartBroker(t, txnBrokerSets...)
	adm := newAdmin(t, b, "admin")
	topic, group := "kadm-txn", "kadm-txn-group"
	const txnID = "kadm-open-txn"
	createTopic(t, adm, topic, 2)
	ctx := testCtx(t, 60*time.Second)

	cl := newClient(t, b, "kadm-txn-producer",
		kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(60*time.Second),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	// A plain offset commit before the transaction.
	var pre kadm.Offsets
	pre.AddOffset(topic, 0, 5, -1)
	if err := adm.CommitAllOffsets(ctx, group, pre); err != nil {
		t.Fatalf("CommitOffsets %s: %v", group, err)
	}
	t0 := time.Now()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatalf("BeginTransaction: %v", err)
	}
	var firstOffset int64 = -1
	for i := 0; i < 3; i++ {
		r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 1, Value: []byte(fmt.Sprintf("open-%d", i))}).First()
		if err != nil {
			t.Fatalf("ProduceSync in the transaction: %v", err)
		}
		if i == 0 {
			firstOffset = r.Offset
		}
	}
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatalf("ProducerID: %v", err)
	}
	t.Logf("transaction %s open: producer id %d epoch %d, first record at offset %d", txnID, pid, epoch, firstOffset)

	// ListTransactions, unfiltered and filtered.
	lt, err := adm.ListTransactions(ctx, nil, nil)
	if err != nil {
		t.Fatalf("ListTransactions: %v", err)
	}
	if l, ok := lt[txnID]; !ok || l.State != "Ongoing" || l.ProducerID != pid {
		t.Errorf("ListTransactions: %s = %+v (listed %v), want Ongoing with producer id %d", txnID, l, ok, pid)
	}
	if lt, err := adm.ListTransactions(ctx, nil, []string{"Ongoing"}); err != nil || !hasTxn(lt, txnID) {
		t.Errorf("ListTransactions(state Ongoing) = %v, %v; want %s listed", lt.TransactionalIDs(), err, txnID)
	}
	if lt, err := adm.ListTransactions(ctx, nil, []string{"CompleteCommit"}); err != nil || hasTxn(lt, txnID) {
		t.Errorf("ListTransactions(state CompleteCommit) = %v, %v; want %s not listed", lt.TransactionalIDs(), err, txnID)
	}
	if lt, err := adm.ListTransactions(ctx, []int64{pid + 1000}, nil); err != nil || hasTxn(lt, txnID) {
		t.Errorf("ListTransactions(producer id %d) = %v, %v; want %s not listed", pid+1000, lt.TransactionalIDs(), err, txnID)
	}
	if lt, err := adm.ListTransactions(ctx, []int64{pid}, nil); err != nil || !hasTxn(lt, txnID) {
		t.Errorf("ListTransactions(producer id %d) = %v, %v; want %s listed", pid, lt.TransactionalIDs(), err, txnID)
	}

	// DescribeTransactions.
	dt := describeTxn(t, ctx, adm, txnID)
	if dt.State != "Ongoing" || dt.ProducerID != pid || dt.ProducerEpoch != epoch || dt.TimeoutMillis != 60000 {
		t.Errorf("DescribeTransactions %s = state %q pid %d epoch %d timeout %d; want Ongoing, %d, %d, 60000",
			txnID, dt.State, dt.ProducerID, dt.ProducerEpoch, dt.TimeoutMillis, pid, epoch)
	}
	if want := (kadm.TopicsSet{topic: {1: {}}}); !reflect.DeepEqual(dt.Topics, want) {
		t.Errorf("DescribeTransactions %s: partitions %v, want %v", txnID, dt.Topics.Sorted(), want.Sorted())
	}
	if start := time.UnixMilli(dt.StartTimestamp); start.Before(t0.Add(-5*time.Second)) || start.After(time.Now().Add(5*time.Second)) {
		t.Errorf("DescribeTransactions %s: start timestamp %v, but the transaction began at %v", txnID, start, t0)
	}

	// DescribeProducers: partition 1 has our producer with its open
	// transaction's first offset; partition 0 has no producer.
	dp, err := adm.DescribeProducers(ctx, kadm.TopicsSet{topic: {0: {}, 1: {}}})
	if err != nil {
		t.Fatalf("DescribeProducers: %v", err)
	}
	p0, p1 := dp[topic].Partitions[0], dp[topic].Partitions[1]
	if p0.Err != nil || len(p0.ActiveProducers) != 0 {
		t.Errorf("DescribeProducers %s/0: err %v, producers %+v; want none", topic, p0.Err, p0.ActiveProducers)
	}
	prod, ok := p1.ActiveProducers[pid]
	if p1.Err != nil || len(p1.ActiveProducers) != 1 || !ok {
		t.Fatalf("DescribeProducers %s/1: err %v, producers %+v; want only producer %d", topic, p1.Err, p1.ActiveProducers, pid)
	}
	if prod.ProducerEpoch != epoch || prod.LastSequence != 2 || prod.CurrentTxnStartOffset != firstOffset {
		t.Errorf("DescribeProducers %s/1: %+v; want epoch %d, last sequence 2, current txn start offset %d",
			topic, prod, epoch, firstOffset)
	}
	if ts := time.UnixMilli(prod.LastTimestamp); ts.Before(t0.Add(-5*time.Second)) || ts.After(time.Now().Add(5*time.Second)) {
		t.Errorf("DescribeProducers %s/1: last timestamp %v, records produced since %v", topic, ts, t0)
	}

	// Group offsets inside the transaction (AddOffsetsToTxn, TxnOffsetCommit
	// as a plain transactional producer sends them, generation -1).
	addOffs := kmsg.NewPtrAddOffsetsToTxnRequest()
	addOffs.TransactionalID, addOffs.ProducerID, addOffs.ProducerEpoch, addOffs.Group = txnID, pid, epoch, group
	aoResp, err := addOffs.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(aoResp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("AddOffsetsToTxn v%d: %v", addOffs.Version, err)
	}
	commit := kmsg.NewPtrTxnOffsetCommitRequest()
	commit.TransactionalID, commit.Group, commit.ProducerID, commit.ProducerEpoch = txnID, group, pid, epoch
	commit.Generation = -1
	ct := kmsg.NewTxnOffsetCommitRequestTopic()
	ct.Topic = topic
	cp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	cp.Partition, cp.Offset, cp.LeaderEpoch = 0, 42, -1
	meta := "in-txn"
	cp.Metadata = &meta
	ct.Partitions = append(ct.Partitions, cp)
	commit.Topics = append(commit.Topics, ct)
	tcResp, err := commit.RequestWith(ctx, cl)
	if err == nil {
		for _, rt := range tcResp.Topics {
			for _, rp := range rt.Partitions {
				if e := kerr.ErrorForCode(rp.ErrorCode); e != nil {
					err = fmt.Errorf("%s/%d: %w", rt.Topic, rp.Partition, e)
				}
			}
		}
	}
	if err != nil {
		t.Fatalf("TxnOffsetCommit v%d: %v", commit.Version, err)
	}
	// Still the transaction's own partitions (Kafka also lists the group's
	// __consumer_offsets partition here; a single node has none to list).
	dt = describeTxn(t, ctx, adm, txnID)
	if dt.State != "Ongoing" || !dt.Topics.Lookup(topic, 1) {
		t.Errorf("after AddOffsetsToTxn: DescribeTransactions %s = state %q partitions %v; want Ongoing with %s/1",
			txnID, dt.State, dt.Topics.Sorted(), topic)
	}
	t.Logf("after AddOffsetsToTxn the transaction lists %v", dt.Topics.Sorted())

	// The pending offset is not visible: FetchOffsets still answers the
	// offset committed before the transaction.
	fo, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("FetchOffsets %s: %v", group, err)
	}
	if o, ok := fo.Lookup(topic, 0); !ok || o.Err != nil || o.At != 5 {
		t.Errorf("FetchOffsets %s during the transaction: %s/0 = %+v (found %v); want the pre-transaction 5, not the pending 42", group, topic, o, ok)
	}
	// OffsetFetch naming the partition with require_stable: UNSTABLE_OFFSET_COMMIT.
	if code, off, err := offsetFetchStable(ctx, cl, group, topic, 0); err != nil || code != kerr.UnstableOffsetCommit.Code {
		t.Errorf("OffsetFetch(require_stable) %s %s/0 during the transaction = error code %d offset %d (%v); want %d UNSTABLE_OFFSET_COMMIT",
			group, topic, code, off, err, kerr.UnstableOffsetCommit.Code)
	}

	// Commit, then everything describes the finished transaction.
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("EndTransaction(commit): %v", err)
	}
	dt = describeTxn(t, ctx, adm, txnID)
	if dt.State != "CompleteCommit" || len(dt.Topics) != 0 || dt.ProducerID != pid {
		t.Errorf("after the commit: DescribeTransactions %s = state %q partitions %v pid %d; want CompleteCommit, none, %d",
			txnID, dt.State, dt.Topics.Sorted(), dt.ProducerID, pid)
	}
	lt, err = adm.ListTransactions(ctx, nil, nil)
	if err != nil || lt[txnID].State != "CompleteCommit" {
		t.Errorf("after the commit: ListTransactions %s = %+v, %v; want CompleteCommit", txnID, lt[txnID], err)
	}
	dp, err = adm.DescribeProducers(ctx, kadm.TopicsSet{topic: {1: {}}})
	if err != nil {
		t.Fatalf("DescribeProducers after the commit: %v", err)
	}
	prod, ok = dp[topic].Partitions[1].ActiveProducers[pid]
	if !ok || prod.CurrentTxnStartOffset != -1 || prod.LastSequence != 2 {
		t.Errorf("after the commit: DescribeProducers %s/1 = %+v (found %v); want producer %d, no open transaction (-1), last sequence 2",
			topic, prod, ok, pid)
	}
	if code, off, err := offsetFetchStable(ctx, cl, group, topic, 0); err != nil || code != 0 || off != 42 {
		t.Errorf("OffsetFetch(require_stable) %s %s/0 after the commit = error code %d offset %d (%v); want 42", group, topic, code, off, err)
	}
	fo, err = adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("FetchOffsets %s after the commit: %v", group, err)
	}
	if o, ok := fo.Lookup(topic, 0); !ok || o.Err != nil || o.At != 42 || o.Metadata != meta {
		t.Errorf("after the commit: FetchOffsets %s %s/0 = %+v (found %v); want 42 %q", group, topic, o, ok, meta)
	}
}

// offsetFetchStable sends OffsetFetch for one partition with require_stable
// and returns its partition error code and offset.
func offsetFetchStable(ctx context.Context, cl *kgo.Client, group, topic string, partition int32) (int16, int64, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	req.RequireStable = true
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	rt.Partitions = []int32{partition}
	req.Topics = append(req.Topics, rt)
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(c, cl)
	if err != nil {
		return 0, 0, err
	}
	if len(resp.Groups) > 0 {
		g := resp.Groups[0]
		if g.ErrorCode != 0 {
			return g.ErrorCode, -1, fmt.Errorf("group error %d", g.ErrorCode)
		}
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				if t.Topic == topic && p.Partition == partition {
					return p.ErrorCode, p.Offset, nil
				}
			}
		}
		return 0, 0, fmt.Errorf("OffsetFetch v%d response has no %s/%d: %+v", req.Version, topic, partition, g.Topics)
	}
	if resp.ErrorCode != 0 {
		return resp.ErrorCode, -1, fmt.Errorf("group error %d", resp.ErrorCode)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if t.Topic == topic && p.Partition == partition {
				return p.ErrorCode, p.Offset, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("OffsetFetch v%d response has no %s/%d: %+v", req.Version, topic, partition, resp.Topics)
}

func hasTxn(lt kadm.ListedTransactions, id string) bool {
	_, ok := lt[id]
	return ok
}

func describeTxn(t *testing.T, ctx context.Context, adm *kadm.Client, id string) kadm.DescribedTransaction {
	t.Helper()
	ds, err := adm.DescribeTransactions(ctx, id)
	if err != nil {
		t.Fatalf("DescribeTransactions %s: %v", id, err)
	}
	d, err := ds.On(id, nil)
	if err == nil {
		err = d.Err
	}
	if err != nil {
		t.Fatalf("DescribeTransactions %s: %v", id, err)
	}
	return d
}

func TestKadmGroups(t *testing.T) {
	b := StartBroker(t, txnBrokerSets...)
	adm := newAdmin(t, b, "admin")
	topic, group := "kadm-grp", "kadm-group"
	createTopic(t, adm, topic, 2)
	want := produceNumbered(t, b, topic, 2, 10, "g")
	ctx := testCtx(t, 60*time.Second)

	member := newClient(t, b, "kadm-member",
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(10*time.Second))
	n := 0
	for n < 10 {
		fs := member.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("group member consumed %d of 10 records", n)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Logf("fetch %s/%d: %v", tp, p, err) })
		n += fs.NumRecords()
	}
	if err := member.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("CommitUncommittedOffsets: %v", err)
	}

	lg, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatalf("ListGroups: %v", err)
	}
	if g, ok := lg[group]; !ok || g.ProtocolType != "consumer" || g.State != "Stable" {
		t.Errorf("ListGroups: %s = %+v (listed %v); want protocol type consumer, state Stable", group, g, ok)
	}
	if lg, err := adm.ListGroups(ctx, "Empty"); err != nil || contains(lg.Groups(), group) {
		t.Errorf("ListGroups(state Empty) = %v, %v; want %s not listed", lg.Groups(), err, group)
	}

	dg, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		t.Fatalf("DescribeGroups: %v", err)
	}
	d := dg[group]
	if d.Err != nil || d.State != "Stable" || d.ProtocolType != "consumer" || d.Protocol != "cooperative-sticky" || len(d.Members) != 1 {
		t.Fatalf("DescribeGroups %s = err %v state %q protocol type %q protocol %q members %d; want Stable consumer cooperative-sticky, 1 member",
			group, d.Err, d.State, d.ProtocolType, d.Protocol, len(d.Members))
	}
	m := d.Members[0]
	if m.ClientID != "kadm-member" || m.MemberID == "" {
		t.Errorf("DescribeGroups %s member: id %q client id %q; want client id kadm-member", group, m.MemberID, m.ClientID)
	}
	// Kafka shows the member's address as "/" and its IP.
	if m.ClientHost != "/127.0.0.1" {
		t.Errorf("DescribeGroups %s member client host %q, want /127.0.0.1", group, m.ClientHost)
	}
	if want := (kadm.TopicsSet{topic: {0: {}, 1: {}}}); !reflect.DeepEqual(d.AssignedPartitions(), want) {
		t.Errorf("DescribeGroups %s: assigned %v, want %v", group, d.AssignedPartitions().Sorted(), want.Sorted())
	}
	if cm, ok := m.Join.AsConsumer(); !ok || !contains(cm.Topics, topic) {
		t.Errorf("DescribeGroups %s member subscription: %+v (decoded %v); want topic %s", group, cm, ok, topic)
	}

	checkOffsets := func(when string) {
		t.Helper()
		fo, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			t.Fatalf("FetchOffsets %s %s: %v", group, when, err)
		}
		for p, vs := range want {
			if o, ok := fo.Lookup(topic, p); !ok || o.Err != nil || o.At != int64(len(vs)) {
				t.Errorf("FetchOffsets %s %s: %s/%d = %+v (found %v), want %d", group, when, topic, p, o, ok, len(vs))
			}
		}
	}
	checkOffsets("with a live member")
	fo, err := adm.FetchOffsets(ctx, "kadm-no-such-group")
	if err != nil || len(fo.Offsets()) != 0 {
		t.Errorf("FetchOffsets of a group that never existed = %v, %v; want no offsets", fo.Offsets(), err)
	}

	// The member leaves: the group is Empty, its offsets stay.
	closeBounded(t, "kadm-member", member.Close)
	dg, err = adm.DescribeGroups(ctx, group)
	if err != nil {
		t.Fatalf("DescribeGroups after leave: %v", err)
	}
	if d := dg[group]; d.Err != nil || d.State != "Empty" || len(d.Members) != 0 {
		t.Errorf("DescribeGroups %s after the member left = err %v state %q members %d; want Empty, 0", group, d.Err, d.State, len(d.Members))
	}
	lg, err = adm.ListGroups(ctx, "Empty")
	if err != nil || !contains(lg.Groups(), group) {
		t.Errorf("ListGroups(state Empty) after the member left = %v, %v; want %s listed", lg.Groups(), err, group)
	}
	checkOffsets("after the member left")
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
