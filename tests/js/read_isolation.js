// kafkajs group consumer that reads one topic from the beginning under one
// isolation level and prints the values it got, one JSON array on stdout.
//   node read_isolation.js <bootstrap> <topic> <read_committed|read_uncommitted> <expectedCount> <groupId>
// Stops once it has <expectedCount> values and then 1.5 s more with nothing new
// (so that anything it should not see has had a chance to arrive), or after 45 s.
'use strict'
const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, topic, isolation, expectedStr, groupId] = process.argv.slice(2)
const expected = parseInt(expectedStr, 10)
const debug = !!process.env.DOZE_KAFKAJS_DEBUG

async function main () {
  const kafka = new Kafka({
    clientId: 'doze-wire-kafkajs-reader',
    brokers: [bootstrap],
    connectionTimeout: 5000,
    requestTimeout: 15000,
    retry: { retries: 8, initialRetryTime: 100, maxRetryTime: 2000 },
    logLevel: debug ? logLevel.DEBUG : logLevel.WARN
  })
  const consumer = kafka.consumer({
    groupId,
    readUncommitted: isolation === 'read_uncommitted',
    sessionTimeout: 10000,
    heartbeatInterval: 1000,
    maxWaitTimeInMs: 200
  })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const got = []
  let lastNew = Date.now()
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      got.push({ partition, offset: Number(message.offset), value: message.value.toString() })
      lastNew = Date.now()
    }
  })
  const start = Date.now()
  while (Date.now() - start < 45000) {
    if (got.length >= expected && Date.now() - lastNew > 1500) break
    await new Promise(resolve => setTimeout(resolve, 100))
  }
  await consumer.disconnect()
  console.log(JSON.stringify(got))
}

const timer = setTimeout(() => { console.error('kafkajs reader: timed out after 60 s'); process.exit(3) }, 60000)
main().then(() => { clearTimeout(timer); process.exit(0) }, err => {
  console.error(`kafkajs reader failed: ${err && err.stack ? err.stack : err}`)
  process.exit(2)
})
