# Enqueue one email with ruby-pg inside the application's transaction, then read its status.
#
#   DATABASE_URL=postgresql://... ruby enqueue.rb KEY RECIPIENT [--rollback]
require "json"
require "pg"

INSERT = <<~SQL
  INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body)
  VALUES ($1, $2, $3, $4)
  ON CONFLICT (dedupe_key) DO NOTHING
SQL
STATUS = "SELECT status FROM email_deliveries WHERE dedupe_key = $1"

class Rollback < StandardError; end

key, recipient, flag = ARGV
conn = PG.connect(ENV.fetch("DATABASE_URL"))
conn.type_map_for_queries = PG::BasicTypeMapForQueries.new(conn) # Ruby Array -> text[]
begin
  conn.transaction do # COMMIT at the end of the block, ROLLBACK on an exception
    # ... the application's own writes go here, in the same transaction ...
    conn.exec_params(INSERT, [key, [recipient], "Your order", "Thank you for your order."])
    raise Rollback if flag == "--rollback" # the row never existed: nothing is ever sent
  end
rescue Rollback
end
row = conn.exec_params(STATUS, [key]).first
puts JSON.generate(dedupe_key: key, status: row && row["status"])
conn.close
