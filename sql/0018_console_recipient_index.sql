-- outbox-mailer schema, version 18: finding an email by recipient, on a table of millions of rows.
--
-- The operator console's recipient filter (and anyone's SQL) asks for the rows that a given
-- address was sent to, in To, Cc or Bcc. email_recipient_keys() gives a row's addresses as
-- lower-case addr-specs ("Ann <Ann@Example.com>" -> "ann@example.com"), and a GIN index on it
-- answers `email_recipient_keys(to_addresses, cc_addresses, bcc_addresses) @> ARRAY['ann@example.com']`.
-- The hot-path rule holds: the daemon never changes the address columns, so its updates stay HOT;
-- the application's INSERT adds one entry per address (GIN's pending list, merged by VACUUM).
-- Building the index holds the table's write lock for its duration (tens of seconds per
-- million rows); docs/operations.md, "Upgrade".

-- PL/pgSQL: measured per inserted row, it costs about half of the same done by one SQL
-- statement with unnest and array_agg (no DISTINCT: GIN keeps each key once).
CREATE FUNCTION email_recipient_keys(to_addresses text[], cc_addresses text[], bcc_addresses text[])
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    address text;
    keys text[] := '{}';
BEGIN
    FOREACH address IN ARRAY to_addresses || cc_addresses || bcc_addresses LOOP
        IF strpos(address, '<') > 0 THEN  -- "Name <local@domain>": the part in angle brackets
            address := coalesce(substring(address FROM '<([^<>]*)>\s*$'), address);
        END IF;
        keys := keys || lower(btrim(address));
    END LOOP;
    RETURN keys;
END;
$$;

CREATE INDEX email_deliveries_recipients_idx ON email_deliveries
    USING gin (email_recipient_keys(to_addresses, cc_addresses, bcc_addresses));
