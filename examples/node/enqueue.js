// Enqueue one email with node-postgres inside the application's transaction, then read its status.
//
//   DATABASE_URL=postgresql://... node enqueue.js KEY RECIPIENT [--rollback | --template NAME]
//
// With --template, the row names a stored template and gives its data instead of a subject and a body;
// a template that does not exist is refused at the INSERT (the error names it).
'use strict';
const { Client } = require('pg');

const INSERT = `
  INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body)
  VALUES ($1, $2, $3, $4)
  ON CONFLICT (dedupe_key) DO NOTHING`;
const INSERT_TEMPLATE = `
  INSERT INTO email_deliveries (dedupe_key, to_addresses, template, template_data)
  VALUES ($1, $2, $3, $4::jsonb)
  ON CONFLICT (dedupe_key) DO NOTHING`;
const STATUS = 'SELECT status FROM email_deliveries WHERE dedupe_key = $1';

async function main() {
  const [key, recipient, flag, name] = process.argv.slice(2);
  const template = flag === '--template' ? name : null;
  const client = new Client({ connectionString: process.env.DATABASE_URL });
  await client.connect();
  try {
    await client.query('BEGIN');
    try {
      // ... the application's own writes go here, in the same transaction ...
      if (template) {
        await client.query(INSERT_TEMPLATE, [key, [recipient], template, JSON.stringify({ order: key })]);
      } else {
        await client.query(INSERT, [key, [recipient], 'Your order', 'Thank you for your order.']);
      }
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
