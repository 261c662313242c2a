// kafkajs transaction with sendOffsets (AddOffsetsToTxn + TxnOffsetCommit):
// one transaction aborted with offsets 11/12, one committed with offsets 5/7,
// for partitions 0/1 of <srcTopic> in group <groupId>; each writes one record
// to <dstTopic>. Called by tests/test_txn_send_offsets.py:
//   node txn_send_offsets.js <bootstrap> <srcTopic> <dstTopic> <groupId> <transactionalId>
'use strict'
const { Kafka, logLevel, Partitioners } = require('kafkajs')

const [bootstrap, srcTopic, dstTopic, groupId, transactionalId] = process.argv.slice(2)

async function main () {
  const kafka = new Kafka({
    clientId: 'doze-wire-kafkajs-offsets',
    brokers: [bootstrap],
    connectionTimeout: 5000,
    requestTimeout: 15000,
    retry: { retries: 8, initialRetryTime: 100, maxRetryTime: 2000 },
    logLevel: process.env.DOZE_KAFKAJS_DEBUG ? logLevel.DEBUG : logLevel.WARN
  })
  const producer = kafka.producer({
    transactionalId,
    idempotent: true,
    maxInFlightRequests: 1,
    transactionTimeout: 10000,
    createPartitioner: Partitioners.DefaultPartitioner
  })
  await producer.connect()
  try {
    for (const [kind, o0, o1] of [['abort', '11', '12'], ['commit', '5', '7']]) {
      const txn = await producer.transaction()
      await txn.send({ topic: dstTopic, acks: -1, messages: [{ value: kind }] })
      await txn.sendOffsets({
        consumerGroupId: groupId,
        topics: [{ topic: srcTopic, partitions: [{ partition: 0, offset: o0 }, { partition: 1, offset: o1 }] }]
      })
      if (kind === 'commit') await txn.commit()
      else await txn.abort()
      console.log(`${kind}: done`)
    }
  } finally {
    await producer.disconnect()
  }
}

const timer = setTimeout(() => { console.error('kafkajs: timed out after 60 s'); process.exit(3) }, 60000)
main().then(() => { clearTimeout(timer); process.exit(0) }, err => {
  console.error(`kafkajs failed: ${err && err.stack ? err.stack : err}`)
  if (err && err.type) console.error(`kafkajs error type ${err.type} code ${err.code}`)
  process.exit(2)
})
