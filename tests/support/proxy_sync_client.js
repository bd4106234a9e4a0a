// A kafkajs producer for tests/e2e/test_proxy_sync.py: node proxy_sync_client.js BOOTSTRAP TOPIC RECORDS
// Sends RECORDS values one at a time (acks -1) and prints, after each acknowledgement, one JSON line
// {"partition": P, "offset": O}; then waits for a line on stdin (the test read the replica's end) before the next.
const readline = require('readline');
const { Kafka, logLevel } = require('kafkajs');

const [bootstrap, topic, recordsArg] = process.argv.slice(2);
const records = Number(recordsArg);
const kafka = new Kafka({ clientId: 'proxy-sync-test', brokers: [bootstrap], logLevel: logLevel.ERROR });
const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();

(async () => {
  const producer = kafka.producer();
  await producer.connect();
  for (let i = 0; i < records; i++) {
    const [meta] = await producer.send({ topic, acks: -1, messages: [{ value: `js${i}` }] });
    console.log(JSON.stringify({ partition: meta.partition, offset: Number(meta.baseOffset) }));
    await lines.next();
  }
  await producer.disconnect();
  console.log(JSON.stringify({ done: true }));
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
