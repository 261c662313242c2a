package dozego

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// testCtx is a context bounded by d and cancelled when the test ends.
func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// fileLogger is a franz-go logger writing to a log file that the broker helper
// shows if the test fails. DOZE_GO_CLIENT_LOG=debug raises every client's level.
func fileLogger(t *testing.T, b *Broker, name string, level kgo.LogLevel) kgo.Logger {
	if os.Getenv("DOZE_GO_CLIENT_LOG") == "debug" {
		level = kgo.LogLevelDebug
	}
	f, err := os.Create(b.AddLog(name + ".log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	start := time.Now()
	return kgo.BasicLogger(&syncWriter{w: f}, level, func() string {
		return fmt.Sprintf("%8.3fs ", time.Since(start).Seconds())
	})
}

type syncWriter struct {
	mu sync.Mutex
	w  *os.File
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// newClient is a franz-go client on the broker, logging to <name>.log, closed
// (bounded) when the test ends.
func newClient(t *testing.T, b *Broker, name string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	base := []kgo.Opt{
		kgo.SeedBrokers(b.Addr()),
		kgo.ClientID(name),
		kgo.WithLogger(fileLogger(t, b, name, kgo.LogLevelInfo)),
		kgo.DialTimeout(5 * time.Second),
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient %s: %v", name, err)
	}
	t.Cleanup(func() { closeBounded(t, name, cl.Close) })
	return cl
}

func newAdmin(t *testing.T, b *Broker, name string) *kadm.Client {
	return kadm.NewClient(newClient(t, b, name))
}

// closeBounded runs a client's Close and fails the test if it hangs.
func closeBounded(t *testing.T, name string, closeFn func()) {
	done := make(chan struct{})
	go func() { closeFn(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Errorf("%s: Close did not return within 20s", name)
	}
}

func createTopic(t *testing.T, adm *kadm.Client, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("CreateTopic %s (%d partitions): %v (%s)", topic, partitions, err, resp.ErrMessage)
	}
}

// produceNumbered writes n records "<prefix>-%06d" (key = value) with an
// idempotent franz-go producer, record i to partition i % partitions, and
// returns the values of each partition in order.
func produceNumbered(t *testing.T, b *Broker, topic string, partitions int32, n int, prefix string) map[int32][]string {
	t.Helper()
	cl := newClient(t, b, "fill-"+topic, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	want := map[int32][]string{}
	recs := make([]*kgo.Record, 0, n)
	for i := 0; i < n; i++ {
		v := fmt.Sprintf("%s-%06d", prefix, i)
		p := int32(i) % partitions
		want[p] = append(want[p], v)
		recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Key: []byte(v), Value: []byte(v)})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("filling %s: %v", topic, err)
	}
	return want
}

const sentinel = "END-SENTINEL"

// writeSentinels appends one plain (non-transactional) record to each
// partition and returns their offsets. A reader that has reached a sentinel
// has seen everything before it: under read_committed the sentinel is only
// delivered once every transaction before it is decided.
func writeSentinels(t *testing.T, b *Broker, topic string, partitions int32) map[int32]int64 {
	t.Helper()
	cl := newClient(t, b, "sentinel-"+topic, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	offs := map[int32]int64{}
	for p := int32(0); p < partitions; p++ {
		r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte(sentinel)}).First()
		if err != nil {
			t.Fatalf("sentinel to %s/%d: %v", topic, p, err)
		}
		offs[p] = r.Offset
	}
	return offs
}

// readUntil reads topic from the start with the given isolation level until
// every partition has delivered the record at offset until[p] (a sentinel),
// and returns the values before it per partition, in order.
func readUntil(t *testing.T, b *Broker, name, topic string, until map[int32]int64, iso kgo.IsolationLevel, timeout time.Duration) map[int32][]string {
	t.Helper()
	parts := map[int32]kgo.Offset{}
	for p := range until {
		parts[p] = kgo.NewOffset().AtStart()
	}
	cl := newClient(t, b, name,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}),
		kgo.FetchIsolationLevel(iso))
	defer closeBounded(t, name, cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	got := map[int32][]string{}
	done := map[int32]bool{}
	for len(done) < len(until) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			counts := map[int32]int{}
			for p, vs := range got {
				counts[p] = len(vs)
			}
			t.Fatalf("%s: reading %s: only partitions %v of %d reached their sentinel within %v (records read per partition: %v)",
				name, topic, done, len(until), timeout, counts)
		}
		for _, e := range fs.Errors() {
			t.Logf("%s: fetch error %s/%d: %v", name, e.Topic, e.Partition, e.Err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if done[r.Partition] {
				return
			}
			if r.Offset >= until[r.Partition] {
				if r.Offset != until[r.Partition] || string(r.Value) != sentinel {
					t.Errorf("%s: %s/%d offset %d holds %q, expected the sentinel at %d",
						name, topic, r.Partition, r.Offset, r.Value, until[r.Partition])
				}
				done[r.Partition] = true
				return
			}
			got[r.Partition] = append(got[r.Partition], string(r.Value))
		})
	}
	return got
}

// cutDialer dials normally until Cut: then every connection it made is closed
// and every later dial fails, so its client can no longer reach the broker
// (no heartbeat, EndTxn or LeaveGroup) -- as if its process had died.
type cutDialer struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (d *cutDialer) Dial(ctx context.Context, network, host string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		return nil, errors.New("cutDialer: connection cut")
	}
	c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, host)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *cutDialer) Cut() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cut = true
	for _, c := range d.conns {
		c.Close()
	}
}
