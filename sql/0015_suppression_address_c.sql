-- One suppression form whatever the database's locale. lower() follows the database's LC_CTYPE:
-- in the C locale it leaves 'Ë' as it is, in C.UTF-8 it lowercases the final sigma of 'ΟΔΟΣ'
-- to 'σ' where Python gives 'ς'; so the claim (SQL, over the row's recipients) and the writers of
-- email_suppressions (Python, outbox_mailer/suppression.py) could disagree, and a suppressed
-- internationalised address would still get mail. Both now lower-case ASCII letters only
-- (COLLATE "C") after Unicode normal form C: non-ASCII letters compare as written, as RFC 6531
-- local parts are. Addresses already suppressed are in lower case and stay valid.
CREATE OR REPLACE FUNCTION outbox_mailer_suppression_address(address text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT lower(normalize(btrim(coalesce(substring(address FROM '<([^<>]*)>\s*$'), address)), NFC) COLLATE "C")
$$;

ALTER TABLE email_suppressions
    DROP CONSTRAINT email_suppressions_address_normalised,
    ADD CONSTRAINT email_suppressions_address_normalised
        CHECK (address = lower(address COLLATE "C") AND address LIKE '%_@_%' AND address !~ '[<>[:space:]]');
