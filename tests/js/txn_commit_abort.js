// kafkajs transactional producer: commits one transaction and aborts another,
// each writing 3 records to each of two topics. Called by tests/test_txn_clients.py:
//   node txn_commit_abort.js <bootstrap> <topic1> <topic2> <transactionalId> <valuePrefix>
// Exits 0 on success, non-zero (with the error on stderr) otherwise.
'use strict'
const { Kafka, logLevel, Partitioners } = require('kafkajs')

const [bootstrap, topic1, topic2, transactionalId, prefix] = process.argv.slice(2)
const debug = !!process.env.DOZE_KAFKAJS_DEBUG

async function main () {
  const kafka = new Kafka({
    clientId: 'doze-wire-kafkajs',
    brokers: [bootstrap],
    connectionTimeout: 5000,
    requestTimeout: 15000,
    retry: { retries: 8, initialRetryTime: 100, maxRetryTime: 2000 },
    logLevel: debug ? logLevel.DEBUG : logLevel.WARN
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
    for (const [kind, end] of [['commit', 'commit'], ['abort', 'abort']]) {
      const txn = await producer.transaction()
      for (const topic of [topic1, topic2]) {
        await txn.send({
          topic,
          acks: -1,
          messages: [0, 1, 2].map(i => ({ value: `${prefix}-${kind}-${i}` }))
        })
      }
      if (end === 'commit') await txn.commit()
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
