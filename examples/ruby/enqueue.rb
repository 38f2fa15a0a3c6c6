# Enqueue one email with ruby-pg inside the application's transaction, then read its status.
#
#   DATABASE_URL=postgresql://... ruby enqueue.rb KEY RECIPIENT [--rollback | --template NAME]
#
# With --template, the row names a stored template and gives its data instead of a subject and a body;
# a template that does not exist is refused at the INSERT (PG::CheckViolation).
require "json"
require "pg"

INSERT = <<~SQL
  INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body)
  VALUES ($1, $2, $3, $4)
  ON CONFLICT (dedupe_key) DO NOTHING
SQL
INSERT_TEMPLATE = <<~SQL
  INSERT INTO email_deliveries (dedupe_key, to_addresses, template, template_data)
  VALUES ($1, $2, $3, $4::jsonb)
  ON CONFLICT (dedupe_key) DO NOTHING
SQL
STATUS = "SELECT status FROM email_deliveries WHERE dedupe_key = $1"

class Rollback < StandardError; end

key, recipient, flag, name = ARGV
template = name if flag == "--template"
conn = PG.connect(ENV.fetch("DATABASE_URL"))
conn.type_map_for_queries = PG::BasicTypeMapForQueries.new(conn) # Ruby Array -> text[]
begin
  conn.transaction do # COMMIT at the end of the block, ROLLBACK on an exception
    # ... the application's own writes go here, in the same transaction ...
    if template
      conn.exec_params(INSERT_TEMPLATE, [key, [recipient], template, JSON.generate(order: key)])
    else
      conn.exec_params(INSERT, [key, [recipient], "Your order", "Thank you for your order."])
    end
    raise Rollback if flag == "--rollback" # the row never existed: nothing is ever sent
  end
rescue Rollback
end
row = conn.exec_params(STATUS, [key]).first
puts JSON.generate(dedupe_key: key, status: row && row["status"])
conn.close
