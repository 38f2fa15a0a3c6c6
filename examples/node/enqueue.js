// Enqueue one email with node-postgres inside the application's transaction, then read its status.
//
//   DATABASE_URL=postgresql://... node enqueue.js KEY RECIPIENT [--rollback]
'use strict';
const { Client } = require('pg');

const INSERT = `
  INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body)
  VALUES ($1, $2, $3, $4)
  ON CONFLICT (dedupe_key) DO NOTHING`;
const STATUS = 'SELECT status FROM email_deliveries WHERE dedupe_key = $1';

async function main() {
  const [key, recipient, flag] = process.argv.slice(2);
  const client = new Client({ connectionString: process.env.DATABASE_URL });
  await client.connect();
  try {
    await client.query('BEGIN');
    try {
      // ... the application's own writes go here, in the same transaction ...
      await client.query(INSERT, [key, [recipient], 'Your order', 'Thank you for your order.']);
    } catch (err) {
      await client.query('ROLLBACK');
      throw err;
    }
    // ROLLBACK: the row never existed, nothing is ever sent.
    await client.query(flag === '--rollback' ? 'ROLLBACK' : 'COMMIT');
    const { rows } = await client.query(STATUS, [key]);
    console.log(JSON.stringify({ dedupe_key: key, status: rows.length ? rows[0].status : null }));
  } finally {
    await client.end();
  }
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
