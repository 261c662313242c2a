package dozego

// A topic's compression.type: franz-go's batches are stored with the topic's
// codec (uncompressed, gzip, snappy, lz4, zstd: the broker recompresses them,
// as Kafka's LogValidator does), and both franz-go and Sarama read back every
// record, in order, as it was sent.

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestTopicCompressionTypeReadByFranzAndSarama(t *testing.T) {
	b := StartBroker(t)
	adm := newAdmin(t, b, "admin")
	const parts = 2
	for _, codec := range []string{"uncompressed", "gzip", "snappy", "lz4", "zstd"} {
		topic := "codec-" + codec
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		c := codec
		resp, err := adm.CreateTopic(ctx, parts, 1, map[string]*string{"compression.type": &c}, topic)
		cancel()
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatalf("CreateTopic %s with compression.type=%s: %v", topic, codec, err)
		}
		want := produceNumbered(t, b, topic, parts, 2000, codec)
		until := writeSentinels(t, b, topic, parts)
		got := readUntil(t, b, "franz-"+codec, topic, until, kgo.ReadUncommitted(), 60*time.Second)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("franz-go read %s differently from what was sent", topic)
		}
		sgot := saramaReadUntilSentinel(t, b, topic, parts, sarama.ReadUncommitted)
		if !reflect.DeepEqual(sgot, want) {
			t.Fatalf("Sarama read %s differently from what was sent", topic)
		}
	}
}
