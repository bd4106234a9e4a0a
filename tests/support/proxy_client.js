// A kafkajs client for tests/e2e/test_proxy.py: node proxy_client.js BOOTSTRAP TOPIC RECORDS SESSION_MS
// Creates TOPIC (2 partitions), produces RECORDS values (acks -1), consumes them in a new group, lists the topic's
// offsets and the cluster's brokers; prints one JSON line of what it saw.
const { Kafka, logLevel } = require('kafkajs');

const [bootstrap, topic, recordsArg, sessionArg] = process.argv.slice(2);
const records = Number(recordsArg);
const kafka = new Kafka({ clientId: 'proxy-test', brokers: [bootstrap], logLevel: logLevel.ERROR });

(async () => {
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 2 }], waitForLeaders: true });
  const producer = kafka.producer();
  await producer.connect();
  const values = Array.from({ length: records }, (_, i) => `v${i}`);
  await producer.send({ topic, acks: -1, messages: values.map((value) => ({ value })) });
  const consumer = kafka.consumer({ groupId: `g-${topic}`, sessionTimeout: Number(sessionArg), heartbeatInterval: 500 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const got = [];
  await new Promise((resolve) => {
    const timer = setTimeout(resolve, 60000);
    consumer.run({
      eachMessage: async ({ message }) => {
        got.push(message.value.toString());
        if (got.length >= records) { clearTimeout(timer); resolve(); }
      },
    });
  });
  const offsets = await admin.fetchTopicOffsets(topic);
  const cluster = await admin.describeCluster();
  await consumer.disconnect();
  await producer.disconnect();
  await admin.disconnect();
  console.log(JSON.stringify({
    consumed: got.sort(),
    offsets: offsets.map((o) => [o.partition, Number(o.high)]).sort(),
    brokers: cluster.brokers.map((b) => `${b.host}:${b.port}`),
  }));
})().catch((e) => { console.error(e); process.exit(1); });
